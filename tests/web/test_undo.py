"""Undo through its doors: POST /api/interrupts/<id>/undo/ and the inbox's Undo (htmx and without JavaScript).

What undo does is tests/hub/test_undo.py's; here, that each door calls it, says
what happened in words, and refuses in the one shape.
"""

import json

import pytest
from django.urls import reverse

from interrupts.hub import decisions, outbox
from interrupts.models import Decision, Interrupt, Run

from .. import factories as make

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


@pytest.fixture(autouse=True)
def held(settings):
    settings.COUNTERSIGN_UNDO_SECONDS = 3


def raised(run=None, interrupt_id="int-1", message="Clear the cache?"):
    run = run or make.run(status="interrupted")
    return make.interrupt(run, interrupt_id=interrupt_id, message=message, response_schema=SCHEMA,
                          raw={"id": interrupt_id, "reason": "confirmation", "responseSchema": SCHEMA})


@pytest.fixture
def me(client):
    user = make.user(first_name="Rita")
    client.force_login(user)
    return user


def api_post(client, url, body=None):
    return client.post(url, json.dumps(body or {}), content_type="application/json")


def htmx(client, url, data=None):
    return client.post(url, data or {}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="batch")


def test_the_api_undoes_my_decision_and_answers_the_interrupt_pending(client, me):
    interrupt = raised()
    assert api_post(client, f"/api/interrupts/{interrupt.pk}/decide/", {"action": "approve"}).status_code == 201
    assert Run.objects.filter(parent=interrupt.run).count() == 1
    answer = api_post(client, f"/api/interrupts/{interrupt.pk}/undo/")
    assert answer.status_code == 200, answer.content
    assert answer.json()["status"] == "pending" and answer.json()["id"] == interrupt.pk
    assert not Run.objects.filter(parent=interrupt.run).exists()
    again = api_post(client, f"/api/interrupts/{interrupt.pk}/undo/")
    assert again.status_code == 409 and again.json()["code"] == "NOT_DECIDED" and again.json()["detail"]


def test_the_api_refuses_someone_elses_decision_and_one_already_sent(client, me):
    interrupt = raised()
    api_post(client, f"/api/interrupts/{interrupt.pk}/decide/", {"action": "reject"})
    client.force_login(make.user(username="bob"))
    theirs = api_post(client, f"/api/interrupts/{interrupt.pk}/undo/")
    assert theirs.status_code == 403 and theirs.json()["code"] == "NOT_YOURS"
    client.force_login(me)
    Run.objects.filter(parent=interrupt.run).update(retry_at=None)  # the hold is over
    outbox.claim_due(10, "w")
    late = api_post(client, f"/api/interrupts/{interrupt.pk}/undo/")
    assert late.status_code == 409 and late.json()["code"] == "ALREADY_SENT"
    assert "Too late to undo" in late.json()["detail"]
    assert api_post(client, "/api/interrupts/999999/undo/").status_code == 404


def test_the_undo_operation_is_in_the_api_schema(client, me):
    paths = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()["paths"]
    assert "post" in paths["/api/interrupts/{id}/undo/"]


def test_a_decision_in_the_inbox_reads_as_words_with_undo_and_the_hold(client, me):
    interrupt = raised()
    page = htmx(client, reverse("decide", args=[interrupt.pk]), {"action": "reject"}).content.decode()
    assert 'data-keep="decided"' in page and 'data-state="held"' in page
    assert '<strong class="outcome" data-testid="outcome">Rejected</strong>' in page
    assert 'data-testid="undo"' in page and "data-hold" in page and "sending to" in page
    assert "resolved" not in page.replace('data-state="', "") and "Decided elsewhere" not in page
    assert 'data-testid="resumed-run"' not in page  # held: not sent yet


def test_undo_in_the_inbox_brings_the_card_back(client, me):
    interrupt = raised()
    htmx(client, reverse("decide", args=[interrupt.pk]), {"action": "approve"})
    page = htmx(client, reverse("undo", args=[interrupt.pk])).content.decode()
    assert f'id="interrupt-{interrupt.pk}"' in page and 'data-state="open"' in page
    assert Interrupt.objects.get(pk=interrupt.pk).status == "pending"
    assert not Run.objects.filter(parent=interrupt.run).exists()
    # Without JavaScript: a message, and back where the reader was.
    client.post(reverse("decide", args=[interrupt.pk]), {"action": "approve"})
    answer = client.post(reverse("undo", args=[interrupt.pk]), {"next": "/inbox/?q=cache"}, follow=True)
    assert answer.redirect_chain[0][0] == "/inbox/?q=cache"
    assert f"Undone: {interrupt.interrupt_id} waits for a decision again." in answer.content.decode()


def test_the_batch_as_it_stands_follows_a_decision_until_it_is_sent(client, me):
    interrupt = raised()
    htmx(client, reverse("decide", args=[interrupt.pk]), {"action": "approve"})
    url = reverse("undo", args=[interrupt.pk])
    shown = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert 'data-state="held"' in shown and "data-keep" not in shown
    Run.objects.filter(parent=interrupt.run).update(retry_at=None)
    outbox.claim_due(10, "w")
    shown = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert 'data-state="sent"' in shown and 'data-testid="undo"' not in shown
    assert "Approved" in shown and "sent to" in shown and 'data-testid="resumed-run"' in shown
    assert client.get(url).status_code == 302  # a page, not a fragment, without htmx


def test_a_batch_decided_by_a_colleague_says_who_and_what(client, me):
    run = make.run(status="interrupted")
    first, second = raised(run, "a"), raised(run, "b")
    bob = make.user(first_name="Bob")
    make.decision(first, bob, payload={"approved": False}, action="reject")
    Interrupt.objects.filter(pk=first.pk).update(status="resolved")
    page = client.get(reverse("inbox")).content.decode()
    assert "Decided by Bob: Rejected" in page and "(resolved" not in page
    assert page.index("Decided by Bob") < page.index(f'id="interrupt-{second.pk}"')  # where its card stood
    assert page.count('data-testid="undo"') == 0


def test_the_loser_of_a_race_is_told_who_won_and_what(client, me):
    interrupt = raised()
    alice = make.user(first_name="Alice")
    make.decision(interrupt, alice, payload={"approved": True}, action="approve")
    Interrupt.objects.filter(pk=interrupt.pk).update(status="resolved")
    page = htmx(client, reverse("decide", args=[interrupt.pk]), {"action": "approve"}).content.decode()
    assert "Already decided by Alice: Approved" in page and 'data-keep="conflict"' in page
    assert "was already decided by Alice" in page
    assert not Decision.objects.filter(user=me).exists()


def test_the_audit_page_says_who_undid_a_decision_and_which_resume_was_withdrawn(client, me):
    interrupt = raised()
    api_post(client, f"/api/interrupts/{interrupt.pk}/decide/", {"action": "reject", "comment": "not yet"})
    withdrawn = Run.objects.get(parent=interrupt.run).run_id
    assert api_post(client, f"/api/interrupts/{interrupt.pk}/undo/").status_code == 200
    assert api_post(client, f"/api/interrupts/{interrupt.pk}/decide/", {"action": "approve"}).status_code == 201
    page = client.get(reverse("audit")).content.decode()
    assert f"{me.get_username()} undid their decision (Rejected); its resume {withdrawn} was withdrawn" in page


def test_a_decision_and_its_undo_bring_the_header_count_along(client, me):
    interrupt, other = raised(), raised(interrupt_id="int-2")
    badge = '<span class="badge" id="pending-badge" aria-live="polite" aria-label="{n} waiting for you" ' \
            'hx-swap-oob="true">{n}</span>'
    page = htmx(client, reverse("decide", args=[interrupt.pk]), {"action": "approve"}).content.decode()
    assert badge.format(n=1) in page  # only the other one waits now
    page = htmx(client, reverse("undo", args=[interrupt.pk])).content.decode()
    assert badge.format(n=2) in page
    # The page's own reads of a batch carry no badge: only what this reader did moves it.
    assert "pending-badge" not in client.get(reverse("undo", args=[other.pk]), HTTP_HX_REQUEST="true").content.decode()


def test_a_bulk_decision_s_receipt_lists_what_it_decided_and_undoes_it_all(client, me):
    run = make.run(status="interrupted")
    asked = [raised(run, f"int-{n}", f"Clear cache {n}?") for n in range(2)]
    theirs = raised(interrupt_id="int-9", message="Clear the logs?")
    decisions.decide(theirs, make.user(first_name="Olga"), "resolved", {"approved": True})
    ids = [i.pk for i in [*asked, theirs]]
    page = client.post(reverse("bulk-decide"), {"action": "approve", "ids": ids}, HTTP_HX_REQUEST="true")
    said = page.content.decode()
    assert page.status_code == 200 and 'data-testid="bulk-receipt"' in said
    assert said.count('<strong class="outcome">Approved</strong>') == 2 and "Clear cache 1?" in said
    assert 'data-testid="bulk-undo">Undo all 2<' in said
    # Someone else's decision is not mine to undo: refused for that card alone, in words.
    undone = client.post(reverse("bulk-undo"), {"ids": ids}, HTTP_HX_REQUEST="true").content.decode()
    assert "2 undone: they wait for a decision again" in undone and "Olga" in undone
    assert [Interrupt.objects.get(pk=i.pk).status for i in asked] == ["pending", "pending"]
    assert Interrupt.objects.get(pk=theirs.pk).status != "pending"


def test_bulk_undo_refuses_an_empty_or_unreadable_selection(client, me):
    for data in ({}, {"ids": ["x"]}):
        answer = client.post(reverse("bulk-undo"), data, HTTP_HX_REQUEST="true")
        assert answer.status_code == 400 and 'data-testid="bulk-error"' in answer.content.decode()
