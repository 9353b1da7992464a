"""Deciding from an email: a link per action, for its one reader, confirmed on a page after login, used once.

Real emails through Django's test mailer, the real notification queue, and the pages through the test client.
"""

import re
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone
from knox.crypto import hash_token

from interrupts.hub import claims, events, outcomes
from interrupts.hub.notify import email as notify_email
from interrupts.models import Decision, DecisionLink, EmailNotice, Interrupt

from .. import factories as make

pytestmark = pytest.mark.django_db

LINK = re.compile(r"(Approve|Reject|Open): https?://[^/\s]+(/decide/([\w-]+)/)")


def emailed_links(requester=None, reader_email="alice@example.com", schema=None,
                  actions=("approve", "reject", "open")) -> tuple[object, Interrupt, dict[str, str]]:
    """A request raised for ``alice`` (a reviewer), its email sent; her links by action (paths)."""
    alice = make.user(username="alice", email=reader_email)
    run = make.run(status="streaming", requested_by=requester or make.user(reviewer=False))
    raised = {"id": "i-1", "reason": "confirmation", "message": "Send the report?",
              **({"responseSchema": schema} if schema else {})}
    terminal = {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id,
                "outcome": {"type": "interrupt", "interrupts": [raised]}}
    events.append_many(run, [terminal])
    outcomes.finish(run, terminal)
    assert notify_email.send_due_emails("w-1") >= 1
    [message] = [m for m in mail.outbox if m.to == [reader_email]]
    found = {action.lower(): path for action, path, _ in LINK.findall(message.body)}
    assert set(found) == set(actions), message.body
    return alice, Interrupt.objects.get(run=run), found


def test_the_email_carries_a_link_per_action_kept_only_as_a_digest():
    _, interrupt, found = emailed_links()
    tokens = [path.split("/")[2] for path in found.values()]
    stored = DecisionLink.objects.filter(interrupt=interrupt)
    assert sorted(stored.values_list("digest", flat=True)) == sorted(hash_token(t) for t in tokens)
    # The token is in no row: the notice's stored text never held it either.
    assert not any(t in notice.text for notice in EmailNotice.objects.all() for t in tokens)


def test_a_scanner_following_a_link_decides_nothing(client):
    _, interrupt, found = emailed_links()
    followed = client.get(found["approve"])  # no session: the login page, nothing else
    assert followed.status_code == 302 and "/accounts/login/" in followed["Location"]
    assert client.head(found["approve"]).status_code == 302
    assert Decision.objects.count() == 0 and not DecisionLink.objects.filter(used_at__isnull=False).exists()


def test_the_reader_confirms_on_the_page_once_and_a_replay_is_refused(client):
    alice, interrupt, found = emailed_links()
    client.force_login(alice)
    page = client.get(found["approve"])
    assert page.status_code == 200 and b"Send the report?" in page.content
    assert b'data-testid="confirm-approve"' in page.content and b'data-testid="confirm-reject"' not in page.content
    assert Decision.objects.count() == 0  # seeing the page decides nothing
    done = client.post(found["approve"], {"action": "approve"})
    assert done.status_code == 302
    [decision] = Decision.objects.all()
    assert (decision.user, decision.action) == (alice, "approve")
    replayed = client.post(found["approve"], {"action": "approve"})
    assert replayed.status_code == 410 and b"used already" in replayed.content
    assert client.get(found["approve"]).status_code == 410
    assert Decision.objects.count() == 1


def test_a_link_only_offers_its_own_action_and_open_offers_both(client):
    alice, interrupt, found = emailed_links()
    client.force_login(alice)
    assert client.post(found["reject"], {"action": "approve"}).status_code == 400
    assert Decision.objects.count() == 0
    assert DecisionLink.objects.get(digest=hash_token(found["reject"].split("/")[2])).used_at is None
    page = client.get(found["open"]).content
    assert b'data-testid="confirm-approve"' in page and b'data-testid="confirm-reject"' in page
    assert client.post(found["open"], {"action": "reject"}).status_code == 302
    assert Decision.objects.get().action == "reject"


def test_a_forwarded_link_is_refused_to_anyone_else(client):
    _, interrupt, found = emailed_links()
    client.force_login(make.user(username="bob"))  # a reviewer too, but not the one it was sent to
    assert client.get(found["approve"]).status_code == 403
    refused = client.post(found["approve"], {"action": "approve"})
    assert refused.status_code == 403 and b"sent to someone else" in refused.content
    assert Decision.objects.count() == 0


def test_an_old_or_unknown_link_is_refused(client):
    alice, interrupt, found = emailed_links()
    client.force_login(alice)
    DecisionLink.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert client.post(found["approve"], {"action": "approve"}).status_code == 410
    assert client.get("/decide/not-a-token/").status_code == 404
    assert Decision.objects.count() == 0


def test_a_request_a_passkey_must_approve_gets_no_approve_link_and_its_page_offers_only_reject(client):
    make.policy(name="keyed", require_passkey=True)
    alice = make.user(username="alice", email="alice@example.com")
    run = make.run(status="streaming", requested_by=make.user(reviewer=False))
    terminal = {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id,
                "outcome": {"type": "interrupt", "interrupts": [
                    {"id": "i-1", "reason": "confirmation", "message": "Send the report?"}]}}
    events.append_many(run, [terminal])
    outcomes.finish(run, terminal)
    notify_email.send_due_emails("w-1")
    [message] = [m for m in mail.outbox if m.to == ["alice@example.com"]]
    found = {action.lower(): path for action, path, _ in LINK.findall(message.body)}
    assert set(found) == {"reject", "open"} and "Approve: in your inbox, with your passkey" in message.body
    client.force_login(alice)
    page = client.get(found["open"]).content
    assert b'data-testid="confirm-reject"' in page and b'data-testid="confirm-approve"' not in page


def test_a_colleague_s_claim_is_shown_and_a_refused_decision_leaves_the_link_usable(client):
    alice, interrupt, found = emailed_links()
    claims.claim(interrupt, make.user(first_name="Bob"))
    client.force_login(alice)
    page = client.get(found["approve"]).content.decode()
    assert "Bob is reviewing this" in page and 'name="confirm_claim"' in page
    refused = client.post(found["approve"], {"action": "approve"})  # as a card would, it asks to confirm
    assert refused.status_code == 409 and b"Bob is reviewing" in refused.content
    assert Decision.objects.count() == 0 and not DecisionLink.objects.filter(used_at__isnull=False).exists()
    assert client.post(found["approve"], {"action": "approve", "confirm_claim": "yes"}).status_code == 302
    [decision] = Decision.objects.all()
    assert (decision.user, decision.action) == (alice, "approve")


def test_a_form_gets_no_approve_link_and_its_page_only_says_no(client):
    schema = {"type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]}
    alice, interrupt, found = emailed_links(schema=schema, actions=("reject", "open"))
    assert "where its form asks for more" in mail.outbox[-1].body
    client.force_login(alice)
    page = client.get(found["open"]).content.decode()
    assert 'data-testid="confirm-reject"' in page and 'data-testid="confirm-approve"' not in page
    refused = client.post(found["open"], {"action": "approve"})
    assert refused.status_code == 400 and Decision.objects.count() == 0
