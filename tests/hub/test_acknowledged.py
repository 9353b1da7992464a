"""What reaches the agent is what was acknowledged (the reply left the server).

A decide request commits its decision, then sends its answer. A process killed
between the two (kill -9 in the load test) left a decision nobody was told was
taken, and the batch's resume carried it to the agent: 2 of 100 interrupts in
tests/e2e/stress_mismatch.py, 1 of 60 threads in a load test. Now a
decision taken for a reply still to be sent (``unsent``) travels only once
``acknowledge`` says the reply left; one never acknowledged is taken back by
``drop_unacknowledged``. In process, on SQLite and PostgreSQL alike.
"""

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone

from interrupts.hub import decisions, outbox, replies
from interrupts.models import AuditEntry, Decision, Interrupt, Run

from .. import factories as make
from ..waiting import until

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
APPROVE, REJECT = {"approved": True}, {"approved": False}


@pytest.fixture(autouse=True)
def no_undo_window(settings):
    settings.COUNTERSIGN_UNDO_SECONDS = 0  # as in the load test: a resume leaves as soon as it may


def batch(size: int) -> list[Interrupt]:
    run = make.run(make.thread(), status="interrupted")
    return [make.interrupt(run, interrupt_id=f"int-{n}", raw={"id": f"int-{n}", "reason": "confirmation",
                                                               "responseSchema": SCHEMA}, response_schema=SCHEMA)
            for n in range(size)]


def resumes(interrupt) -> list[Run]:
    return list(Run.objects.filter(parent=interrupt.run_id, resume_key__isnull=False))


def later():
    """The sweep's clock once the grace has passed: the process that decided is gone."""
    return timezone.now() + timedelta(seconds=61)


def test_a_closing_decision_whose_answer_never_left_is_not_sent_but_taken_back():
    [interrupt] = batch(1)
    decision = decisions.decide(interrupt, make.user(), "resolved", REJECT, unsent=True)
    [resume] = resumes(interrupt)
    assert outbox.claim_due(10, "w") == []  # held: its reviewer has not been told yet

    assert decisions.drop_unacknowledged(later()) == 1  # the process died before replying

    assert resumes(interrupt) == []  # withdrawn: the agent never hears of it
    interrupt.refresh_from_db()
    assert interrupt.status == "pending" and interrupt.unacknowledged_id is None
    assert Decision.objects.get(pk=decision.pk).superseded_at is not None
    assert AuditEntry.objects.filter(kind=decisions.UNACKNOWLEDGED, subject=f"decision:{decision.pk}").exists()
    assert not Run.objects.filter(pk=resume.pk).exists()


def test_an_acknowledged_decision_goes_at_once_and_the_sweep_leaves_it():
    [interrupt] = batch(1)
    decision = decisions.decide(interrupt, make.user(), "resolved", APPROVE, unsent=True)
    [resume] = resumes(interrupt)
    decisions.acknowledge([decision])  # the reply left
    assert outbox.claim_due(10, "w") == [(resume.pk, True)]
    assert decisions.drop_unacknowledged(later()) == 0
    assert Interrupt.objects.get(pk=interrupt.pk).status == "resolved"


def test_an_earlier_unacknowledged_decision_holds_the_batch_another_one_completes():
    # The load test's other case: the decision lost with its process was not the batch's last.
    first, second = batch(2)
    lost = decisions.decide(first, make.user(), "resolved", APPROVE, unsent=True)
    closing = decisions.decide(second, make.user(), "resolved", REJECT, unsent=True)
    decisions.acknowledge([closing])
    [resume] = resumes(second)
    assert outbox.claim_due(10, "w") == []  # the first answer was never acknowledged

    assert decisions.drop_unacknowledged(later()) == 1
    assert resumes(second) == []
    assert Interrupt.objects.get(pk=first.pk).status == "pending"
    assert Interrupt.objects.get(pk=second.pk).status == "resolved"  # acknowledged: it stands
    assert Decision.objects.get(pk=lost.pk).superseded_at is not None

    # Decided again, and this time told: the resume carries exactly the acknowledged answers.
    again = decisions.decide(first, make.user(), "resolved", REJECT, unsent=True)
    decisions.acknowledge([again])
    [resume] = resumes(second)
    assert outbox.claim_due(10, "w") == [(resume.pk, True)]
    assert {e["interruptId"]: e["payload"] for e in resume.input["resume"]} == {"int-0": REJECT, "int-1": REJECT}


def test_the_grace_is_not_cut_short():
    [interrupt] = batch(1)
    decisions.decide(interrupt, make.user(), "resolved", APPROVE, unsent=True)
    assert decisions.drop_unacknowledged(timezone.now()) == 0  # its reply may still be on its way
    assert len(resumes(interrupt)) == 1


def test_a_decision_made_where_the_caller_itself_is_the_reply_is_not_held():
    [interrupt] = batch(1)
    decisions.decide(interrupt, make.user(), "resolved", APPROVE)  # a command, the test client: no reply to wait for
    [resume] = resumes(interrupt)
    assert outbox.claim_due(10, "w") == [(resume.pk, True)]


# Through the real HTTP stack (project.asgi: AfterReply around Django), as daphne calls it.

committed = pytest.mark.django_db(transaction=True)


def rejection(interrupt_pk: int, token: str) -> tuple[bytes, dict]:
    """The body and ASGI scope of a POST rejecting ``interrupt_pk`` at the decide endpoint, as daphne calls it."""
    body = json.dumps({"action": "reject"}).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": f"/api/interrupts/{interrupt_pk}/decide/", "raw_path": b"", "query_string": b"",
             "root_path": "", "client": ("127.0.0.1", 50000), "server": ("localhost", 80),
             "headers": [(b"host", b"localhost"), (b"authorization", f"Token {token}".encode()),
                         (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
    return body, scope


async def post_decision(interrupt_pk: int, token: str, *, reply_leaves: bool) -> list[dict]:
    """POST a rejection to the decide endpoint; ``reply_leaves`` False: the client is gone before its body goes out."""
    from project.asgi import application

    body, scope = rejection(interrupt_pk, token)
    requested, sent = False, []

    async def receive():
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client stays

    async def send(message):
        if message["type"] == "http.response.body" and not reply_leaves:
            raise ConnectionResetError("killed before the answer left")
        sent.append(message)

    try:
        await application(scope, receive, send)
    except (ConnectionResetError, ExceptionGroup):
        assert not reply_leaves
    return sent


def reviewer_token() -> str:
    return make.token(make.user())


@committed
async def test_a_decision_whose_answer_never_left_the_server_never_reaches_the_agent():
    """The process stops for good between commit and answer: its body is never handed over, nothing after runs."""
    from project.asgi import application

    [interrupt] = await sync_to_async(batch)(1)
    token = await sync_to_async(reviewer_token)()
    body, scope = rejection(interrupt.pk, token)
    frozen, started = asyncio.Event(), asyncio.Event()
    messages = iter([{"type": "http.request", "body": body, "more_body": False}])

    async def receive():
        return next(messages, None) or await frozen.wait()

    async def send(message):
        if message["type"] == "http.response.start":
            started.set()
        else:
            await frozen.wait()  # as a killed process: the answer never goes, and nothing runs after

    serving = asyncio.ensure_future(application(scope, receive, send))
    await asyncio.wait_for(started.wait(), 10)  # committed, and about to answer

    def held():
        [resume] = resumes(interrupt)
        return outbox.claim_due(10, "w") == [] and resume

    assert await sync_to_async(held)()  # before: claimed at once, and sent with an answer nobody was told of
    assert await sync_to_async(decisions.drop_unacknowledged)(later()) == 1
    assert await sync_to_async(resumes)(interrupt) == []
    assert (await Interrupt.objects.aget(pk=interrupt.pk)).status == "pending"
    serving.cancel()


@committed
async def test_a_decision_whose_client_left_before_the_answer_stands():
    """A reviewer who navigated away decided all the same: the process lives, so the decision travels."""
    [interrupt] = await sync_to_async(batch)(1)
    token = await sync_to_async(reviewer_token)()
    sent = await post_decision(interrupt.pk, token, reply_leaves=False)
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [201]

    def acknowledged():
        return not Interrupt.objects.filter(pk=interrupt.pk, unacknowledged__isnull=False).exists()

    await until(sync_to_async(acknowledged))
    [resume] = await sync_to_async(resumes)(interrupt)
    assert await sync_to_async(outbox.claim_due)(10, "w") == [(resume.pk, True)]


@committed
async def test_a_decision_whose_answer_left_goes_to_the_agent():
    [interrupt] = await sync_to_async(batch)(1)
    token = await sync_to_async(reviewer_token)()
    sent = await post_decision(interrupt.pk, token, reply_leaves=True)
    assert json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))[
        "payload"] == REJECT

    def acknowledged():
        return not Interrupt.objects.filter(pk=interrupt.pk, unacknowledged__isnull=False).exists()

    await until(sync_to_async(acknowledged))  # on a thread of its own, once the body was handed over
    [resume] = await sync_to_async(resumes)(interrupt)
    assert await sync_to_async(outbox.claim_due)(10, "w") == [(resume.pk, True)]
    assert [e["payload"] for e in resume.input["resume"]] == [REJECT]


# --- the thread that acknowledges ---------------------------------------------------------------------


def _on_one_thread(work: list) -> object:
    """``replies._run(work)`` on a thread of its own, as after a reply; the connection the thread is left with."""
    with ThreadPoolExecutor(1) as thread:
        thread.submit(replies._run, work).result()
        return thread.submit(lambda: connection.connection).result()


@pytest.mark.django_db(transaction=True)
def test_work_after_a_reply_keeps_sqlite_s_connection_and_gives_a_pooled_one_back():
    """Reopening SQLite's connection for every acknowledgement cost about a millisecond of each resume."""
    seen = []

    def work():
        Interrupt.objects.exists()
        seen.append(connection.connection)

    left = _on_one_thread([work, work])
    if connection.vendor == "sqlite":
        assert seen[0] is seen[1] is left is not None
    else:
        assert left is None  # back to the pool: an idle thread holds none
        assert None not in seen


@pytest.mark.django_db(transaction=True)
def test_work_after_a_reply_tries_again_on_a_new_connection_after_a_database_error(monkeypatch):
    monkeypatch.setattr(replies, "RETRY_DELAYS", (0.0,))
    seen, tries = [], []

    def work():
        tries.append(1)
        seen.append(connection.connection)
        if len(tries) == 1:
            with connection.cursor() as cursor:
                cursor.execute("SELECT * FROM no_such_table")  # a database error: this connection is suspect
        Interrupt.objects.exists()
        seen.append(connection.connection)

    _on_one_thread([work])
    assert len(tries) == 2
    assert seen[-1] is not None and seen[-1] is not seen[1]  # not the connection the error was on
