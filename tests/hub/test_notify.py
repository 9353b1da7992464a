"""Notifications through the outbox: queued once per event in the change's transaction, sent by one process,
retried with backoff, signed as resumes are, and emailed to the people who may decide."""

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.db import transaction
from django.utils import timezone

from interrupts.hub import decisions, events, outcomes
from interrupts.hub.notify import email as notify_email
from interrupts.hub.notify import enqueue, webhooks
from interrupts.models import Delivery, DeliveryAttempt, EmailNotice, Interrupt, NotificationPreference, Webhook
from interrupts.protocol import signing
from interrupts.sdk.verify import check_signature

from .. import factories as make

pytestmark = pytest.mark.django_db
committed = pytest.mark.django_db(transaction=True)


class Receiver:
    """A real HTTP receiver on a loopback port (a thread of this process), answering ``status`` and recording."""

    def __init__(self, status: int = 200) -> None:
        receiver = self
        self.status, self.received = status, []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.received.append((dict(self.headers), body))
                self.send_response(receiver.status)
                if 300 <= receiver.status < 400:
                    self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"thanks " * 1000)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made = Receiver()
    yield made
    made.close()


def raise_on(run, *items):
    """Finish ``run`` with an interrupt outcome of ``items`` (ids), as the streamer does."""
    terminal = {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id,
                "outcome": {"type": "interrupt", "interrupts": [
                    {"id": i, "reason": "confirmation", "message": "Send the report?"} for i in items]}}
    events.append_many(run, [terminal])
    outcomes.finish(run, terminal)
    return list(Interrupt.objects.filter(run=run).order_by("pk"))


def deliver(worker="w-1"):
    """One webhook round as the supervisor's, on this thread (the test's transaction): claim, POST, record."""
    outgoing = webhooks.claim_deliveries(worker)
    for item, answer in zip(outgoing, asyncio.run(webhooks.post_all(outgoing)) if outgoing else [], strict=False):
        webhooks.record(item, worker, answer)
    return len(outgoing)


def streaming_run(**fields):
    return make.run(status="streaming", **fields)


# --- queuing: once per event, in the change's transaction ------------------------------------------


def test_a_raised_interrupt_queues_one_delivery_per_webhook_and_raising_it_again_queues_nothing():
    hook, other = Webhook.objects.create(name="all", url="http://127.0.0.1:9/a"), \
        Webhook.objects.create(name="b", url="http://127.0.0.1:9/b")
    run = streaming_run()
    [interrupt] = raise_on(run, "i-1")
    rows = list(Delivery.objects.order_by("webhook__name"))
    assert [(d.webhook, d.event, d.key, d.status) for d in rows] == [
        (hook, "raised", f"raised:interrupt:{interrupt.pk}", "queued"),
        (other, "raised", f"raised:interrupt:{interrupt.pk}", "queued")]
    body = json.loads(rows[0].body)
    assert body["type"] == "interrupt.raised" and body["id"] == f"raised:interrupt:{interrupt.pk}"
    assert body["interrupt"]["interruptId"] == "i-1" and body["interrupt"]["message"] == "Send the report?"
    assert body["agent"]["name"] == run.agent.name and body["thread"]["threadId"] == run.thread.thread_id
    enqueue.raised(run, [interrupt])  # the same event told twice
    assert Delivery.objects.count() == 2


def test_a_change_that_rolls_back_queues_nothing():
    Webhook.objects.create(name="all", url="http://127.0.0.1:9/a")
    make.user(email="r@example.com")
    run = streaming_run()
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            raise_on(run, "i-1")
            assert Delivery.objects.count() == 1 and EmailNotice.objects.count() == 1
            raise RuntimeError("the change fails after queuing")
    assert not Delivery.objects.exists() and not EmailNotice.objects.exists()


def test_webhooks_are_scoped_by_events_group_and_policy():
    team, others = Group.objects.create(name="payments"), Group.objects.create(name="others")
    agent = make.agent()
    governing = make.policy(agent=agent, groups=[team])
    Webhook.objects.create(name="every", url="http://127.0.0.1:9/1")
    Webhook.objects.create(name="team", url="http://127.0.0.1:9/2", group=team)
    Webhook.objects.create(name="policy", url="http://127.0.0.1:9/3", policy=governing)
    Webhook.objects.create(name="other-team", url="http://127.0.0.1:9/4", group=others)
    Webhook.objects.create(name="decided-only", url="http://127.0.0.1:9/5", events=["decided"])
    Webhook.objects.create(name="off", url="http://127.0.0.1:9/6", active=False)
    raise_on(streaming_run(thread_obj=make.thread(agent=agent)), "i-1")
    assert sorted(Delivery.objects.values_list("webhook__name", flat=True)) == ["every", "policy", "team"]


def test_an_escalation_reaches_the_backup_teams_webhook_and_its_members_by_email():
    backup = Group.objects.create(name="backup")
    member = make.user(email="b@example.com")
    member.groups.add(backup)
    # Backup members the escalation does not let decide it get nothing: no permission, or their own request.
    make.user(reviewer=False, email="reader@example.com").groups.add(backup)
    requester = make.user(email="requester@example.com")
    requester.groups.add(backup)
    make.user(email="someone@example.com")  # a reviewer, but not of the backup team
    agent = make.agent()
    make.policy(agent=agent, users=[make.user()], restricted=True, target_minutes=5, backup_group=backup,
                allow_self_approval=True)
    Webhook.objects.create(name="backup", url="http://127.0.0.1:9/1", group=backup, events=["escalated"])
    [interrupt] = raise_on(streaming_run(thread_obj=make.thread(agent=agent), requested_by=requester), "i-1")
    EmailNotice.objects.all().delete()
    Interrupt.objects.filter(pk=interrupt.pk).update(escalated_at=timezone.now(), escalated_to=backup)
    interrupt = Interrupt.objects.select_related("run__agent", "run__thread", "escalated_to").get(pk=interrupt.pk)
    enqueue.escalated(interrupt)
    enqueue.escalated(interrupt)
    [delivery] = Delivery.objects.all()
    assert json.loads(delivery.body)["escalatedTo"] == "backup"
    assert list(EmailNotice.objects.values_list("user__email", "event")) == [("b@example.com", "escalated")]


def test_decisions_expiries_and_refused_answers_are_each_queued_once():
    Webhook.objects.create(name="all", url="http://127.0.0.1:9/a")
    agent = make.agent()
    make.policy(agent=agent, allow_self_approval=True)
    reviewer = make.user()
    run = streaming_run(thread_obj=make.thread(agent=agent))
    first, second = raise_on(run, "i-1", "i-2")
    decisions.decide(first, reviewer, "resolved", {"approved": True})
    [decided] = Delivery.objects.filter(event="decided")
    body = json.loads(decided.body)
    assert body["decision"]["by"] == reviewer.username and body["decision"]["action"] == "approve"
    Interrupt.objects.filter(pk=second.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    decisions.expire_due()
    assert list(Delivery.objects.filter(event="expired").values_list("interrupt", flat=True)) == [second.pk]
    resume = make.run(run.thread, parent=run, status="streaming", resume_key="k-1")
    outcomes.fail(resume, "AGENT_REFUSED", "no thanks")
    outcomes.fail(resume, "AGENT_REFUSED", "no thanks")  # already ended: nothing more
    [refused] = Delivery.objects.filter(event="refused")
    assert json.loads(refused.body)["refusal"] == {"runId": resume.run_id, "code": "AGENT_REFUSED",
                                                   "message": "no thanks", "interrupts": ["i-1", "i-2"]}


def test_agent_text_is_bounded_json_data_and_ascii():
    Webhook.objects.create(name="all", url="http://127.0.0.1:9/a")
    run = streaming_run()
    terminal = {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id,
                "outcome": {"type": "interrupt", "interrupts": [
                    {"id": "i-1", "reason": "x", "message": "<script>é" + "m" * 50_000}]}}
    events.append_many(run, [terminal])
    outcomes.finish(run, terminal)
    text = Delivery.objects.get().body
    assert text.isascii() and len(text) < 5000
    message = json.loads(text)["interrupt"]["message"]
    assert message.startswith("<script>é") and len(message) == enqueue.MAX_NOTIFY_TEXT_CHARS


# --- sending: signed, retried with backoff, claimed once --------------------------------------------


def test_a_delivery_arrives_signed_with_the_webhooks_secret_and_is_recorded(receiver):
    hook = Webhook.objects.create(name="all", url=receiver.url)
    [interrupt] = raise_on(streaming_run(), "i-1")
    assert deliver() == 1
    [(headers, body)] = receiver.received
    assert check_signature(hook.secret, headers[signing.SIGNATURE_HEADER], body) > 0
    assert headers[webhooks.DELIVERY_HEADER] == f"raised:interrupt:{interrupt.pk}"
    assert headers[webhooks.EVENT_HEADER] == "raised"
    delivery = Delivery.objects.get()
    assert body == delivery.body.encode()
    assert (delivery.status, delivery.attempts, delivery.response_status) == ("delivered", 1, 200)
    assert len(delivery.response_excerpt) == webhooks.MAX_RESPONSE_EXCERPT
    assert DeliveryAttempt.objects.get().response_status == 200
    assert deliver() == 0 and len(receiver.received) == 1


def test_a_failed_delivery_waits_doubling_then_fails_after_its_attempts(settings):
    settings.COUNTERSIGN_WEBHOOK_RETRY_BASE = 10
    settings.COUNTERSIGN_WEBHOOK_ATTEMPTS = 3
    Webhook.objects.create(name="down", url="http://127.0.0.1:9/nobody")  # connection refused
    raise_on(streaming_run(), "i-1")
    waits = []
    for _ in range(3):
        before = timezone.now()
        assert deliver() == 1
        delivery = Delivery.objects.get()
        assert deliver() == 0  # not due yet
        waits.append(round((delivery.next_attempt_at - before).total_seconds()))
        Delivery.objects.update(next_attempt_at=timezone.now())
    assert waits[:2] == [10, 20]
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("failed", 3)
    assert delivery.last_error.startswith("ConnectError")
    assert DeliveryAttempt.objects.filter(delivery=delivery).count() == 3


def test_a_redirect_is_a_failure_never_followed():
    redirecting = Receiver(status=302)
    try:
        Webhook.objects.create(name="moved", url=redirecting.url)
        raise_on(streaming_run(), "i-1")
        deliver()
        delivery = Delivery.objects.get()
        assert (delivery.status, delivery.response_status) == ("queued", 302)
        assert "never followed" in delivery.last_error
        assert len(redirecting.received) == 1
    finally:
        redirecting.close()


def test_a_receiver_that_drips_its_answer_is_cut_off_at_the_timeout(settings):
    # httpx's timeout is per read: a receiver sending a byte just inside it held the notification
    # loop (every webhook and email behind it) for hours, and its lease lapsed into a second send.
    import socket

    settings.COUNTERSIGN_WEBHOOK_TIMEOUT = 1.0
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip():
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        while not stop.wait(0.2):
            try:
                conn.sendall(b"x")
            except OSError:
                break
        conn.close()

    threading.Thread(target=drip, daemon=True).start()
    try:
        Webhook.objects.create(name="slow", url=f"http://127.0.0.1:{listener.getsockname()[1]}/hook")
        raise_on(streaming_run(), "i-1")
        started = time.monotonic()
        deliver()
        assert time.monotonic() - started < 10  # the drip alone would last hours
        delivery = Delivery.objects.get()
        assert (delivery.status, delivery.response_status) == ("delivered", 200)  # it did answer 200
    finally:
        stop.set()
        listener.close()

def test_a_webhook_address_goes_through_the_agents_egress_checks(settings):
    settings.COUNTERSIGN_AGENT_NETWORKS = "!127.0.0.0/8"
    Webhook.objects.create(name="inside", url="http://127.0.0.1:9/x")
    raise_on(streaming_run(), "i-1")
    deliver()
    assert Delivery.objects.get().last_error.startswith("ADDRESS_REFUSED")


def test_a_resend_queues_the_same_body_again_with_fresh_attempts(receiver, settings):
    settings.COUNTERSIGN_WEBHOOK_ATTEMPTS = 1
    hook = Webhook.objects.create(name="all", url="http://127.0.0.1:9/down")
    raise_on(streaming_run(), "i-1")
    deliver()
    delivery = Delivery.objects.get()
    assert delivery.status == "failed"
    Webhook.objects.filter(pk=hook.pk).update(url=receiver.url)
    staff = make.user(is_staff=True)
    assert webhooks.resend(delivery, staff)
    deliver()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("delivered", 2)
    assert receiver.received[0][1] == delivery.body.encode()
    assert list(DeliveryAttempt.objects.order_by("pk").values_list("number", "resent_by")) == [(1, None),
                                                                                               (2, staff.pk)]


def test_a_lapsed_lease_lets_another_process_send_and_the_first_cannot_settle_it():
    Webhook.objects.create(name="all", url="http://127.0.0.1:9/a")
    raise_on(streaming_run(), "i-1")
    [taken] = webhooks.claim_deliveries("w-1")
    assert webhooks.claim_deliveries("w-2") == []
    Delivery.objects.update(lease_until=timezone.now() - timedelta(seconds=1))
    [again] = webhooks.claim_deliveries("w-2")
    assert webhooks.record(taken, "w-1", webhooks.Answer(200, "", "")) is None
    assert webhooks.record(again, "w-2", webhooks.Answer(200, "", "")) == "delivered"


@committed
def test_racing_processes_claim_each_delivery_once():
    Webhook.objects.create(name="all", url="http://127.0.0.1:9/a")
    for n in range(3):
        raise_on(streaming_run(), *[f"i-{n}-{k}" for k in range(10)])
    start = threading.Barrier(6)

    def claim(worker):
        start.wait()
        try:
            return [o.pk for o in webhooks.claim_deliveries(worker, limit=30)]
        finally:
            from django.db import connection
            connection.close()

    with ThreadPoolExecutor(6) as pool:
        taken = list(pool.map(claim, [f"w-{n}" for n in range(6)]))
    every = [pk for pks in taken for pk in pks]
    assert sorted(every) == sorted(Delivery.objects.values_list("pk", flat=True))
    assert len(every) == len(set(every)) == 30


# --- email: who is told, how, once ---------------------------------------------------------------


def users_emailed():
    return sorted(address for message in mail.outbox for address in message.to)


def test_raised_emails_the_eligible_reviewers_once_but_the_requester_and_those_who_chose_none():
    requester = make.user(email="requester@example.com")
    make.user(email="alice@example.com")
    quiet = make.user(email="quiet@example.com")
    NotificationPreference.objects.create(user=quiet, email="none")
    make.user(email="")  # no address
    make.user(reviewer=False, email="outsider@example.com")  # may not decide
    make.user(email="gone@example.com", is_active=False)
    make.user(reviewer=False, email="root@example.com", is_superuser=True)
    [interrupt] = raise_on(streaming_run(requested_by=requester), "i-1")
    enqueue.raised(interrupt.run, [interrupt])  # told twice: still one email each
    assert notify_email.send_due_emails("w-1") == 2
    assert users_emailed() == ["alice@example.com", "root@example.com"]
    message = mail.outbox[0]
    assert "Send the report?" in message.body and "\n" not in message.subject
    assert message.content_subtype == "plain" and "text/plain" in message.message()["Content-Type"]
    assert notify_email.send_due_emails("w-1") == 0


def test_a_policy_naming_a_team_emails_only_the_team():
    team = Group.objects.create(name="payments")
    member = make.user(email="member@example.com")
    member.groups.add(team)
    make.user(email="other@example.com")
    agent = make.agent()
    make.policy(agent=agent, groups=[team])
    raise_on(streaming_run(thread_obj=make.thread(agent=agent)), "i-1")
    notify_email.send_due_emails("w-1")
    assert users_emailed() == ["member@example.com"]


def test_a_digest_reader_gets_one_email_per_period_listing_what_arrived(settings):
    settings.COUNTERSIGN_EMAIL_DIGEST_SECONDS = 3600
    reader = make.user(email="digest@example.com")
    NotificationPreference.objects.create(user=reader, email="digest")
    make.user(email="now@example.com")
    for n in range(3):
        raise_on(streaming_run(), f"i-{n}")
    assert notify_email.send_due_emails("w-1") == 3  # the immediate reader's three
    assert users_emailed() == ["now@example.com"] * 3
    mail.outbox.clear()
    due = EmailNotice.objects.filter(user=reader).values_list("due_at", flat=True)
    assert len(set(due)) == 1 and due[0] > timezone.now()
    EmailNotice.objects.filter(user=reader).update(due_at=timezone.now())
    assert notify_email.send_due_emails("w-1") == 1
    [digest] = mail.outbox
    assert digest.to == ["digest@example.com"] and "3 requests" in digest.subject
    assert all(f"i-{n}" in digest.body for n in range(3))


def test_someone_deactivated_before_their_email_went_is_not_sent_it(settings):
    # A digest waits up to a period: a reviewer who left the team meanwhile must not get the requests.
    settings.COUNTERSIGN_EMAIL_DIGEST_SECONDS = 3600
    leaver = make.user(email="leaver@example.com")
    NotificationPreference.objects.create(user=leaver, email="digest")
    quick = make.user(email="quick@example.com")
    raise_on(streaming_run(), "i-1")
    EmailNotice.objects.update(due_at=timezone.now())
    type(leaver).objects.filter(pk__in=[leaver.pk, quick.pk]).update(is_active=False)
    assert notify_email.send_due_emails("w-1") == 0
    assert mail.outbox == []
    assert set(EmailNotice.objects.values_list("status", flat=True)) == {"failed"}
    assert "deactivated" in EmailNotice.objects.first().last_error

def test_an_email_server_that_fails_loses_nothing_and_is_tried_again(settings):
    settings.MAILERS = {"default": {"BACKEND": "django.core.mail.backends.smtp.EmailBackend",
                                    "OPTIONS": {"host": "127.0.0.1", "port": 9, "timeout": 2}}}
    settings.COUNTERSIGN_WEBHOOK_RETRY_BASE = 30
    make.user(email="alice@example.com")
    [interrupt] = raise_on(streaming_run(), "i-1")
    assert notify_email.send_due_emails("w-1") == 1
    notice = EmailNotice.objects.get()
    assert (notice.status, notice.attempts) == ("queued", 1) and notice.last_error
    assert notice.due_at > timezone.now() + timedelta(seconds=25)
    assert Interrupt.objects.get(pk=interrupt.pk).status == "pending"
    settings.MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}
    EmailNotice.objects.update(due_at=timezone.now())
    assert notify_email.send_due_emails("w-1") == 1
    assert users_emailed() == ["alice@example.com"]
    assert EmailNotice.objects.get().status == "delivered"


def test_a_digest_is_never_split_between_processes():
    reader = make.user(email="digest@example.com")
    NotificationPreference.objects.create(user=reader, email="digest")
    for n in range(3):
        raise_on(streaming_run(), f"i-{n}")
    EmailNotice.objects.update(due_at=timezone.now())
    [one] = notify_email.claim_emails("w-1")
    assert len(one.notices) == 3 and notify_email.claim_emails("w-2") == []


def test_a_batch_is_one_email_per_reviewer_listing_its_requests():
    make.user(email="alice@example.com")
    raise_on(streaming_run(), "i-1", "i-2", "i-3")
    assert notify_email.send_due_emails("w-1") == 1
    [message] = mail.outbox
    assert "3 decisions" in message.subject and all(f"i-{n}" in message.body for n in (1, 2, 3))
