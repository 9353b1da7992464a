"""Undo, in process: a person takes their own decision back while the batch's resume is unsent.

A decision that completes a batch holds its resume for COUNTERSIGN_UNDO_SECONDS
(the suite's default is 0; these tests set it), and undo withdraws that resume
while no process has taken it. On PostgreSQL too: the race with the outbox is a
row lock there, the one writer on SQLite.
"""

import asyncio
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from interrupts.hub import decisions, outbox, runs, wakeup
from interrupts.hub.refusals import Refusal
from interrupts.hub.trail import chain, verify
from interrupts.live import relay
from interrupts.models import AuditEntry, Decision, Interrupt, Run
from interrupts.rules.words import OUTCOME_WORDS, outcome_words

from .. import factories as make
from ..e2e.conftest import wait_for

pytestmark = pytest.mark.django_db
committed = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
APPROVE, REJECT = {"approved": True}, {"approved": False}


@pytest.fixture(autouse=True)
def held(settings):
    settings.COUNTERSIGN_UNDO_SECONDS = 3


def raised(run=None, interrupt_id="int-1", agent=None, **fields):
    run = run or make.run(make.thread(**({"agent": agent} if agent else {})), status="interrupted")
    raw = {"id": interrupt_id, "reason": "confirmation", "responseSchema": SCHEMA}
    if fields.get("expires_at"):
        raw["expiresAt"] = fields["expires_at"].isoformat()
    return make.interrupt(run, interrupt_id=interrupt_id, raw=raw, response_schema=SCHEMA, **fields)


def fresh(interrupt) -> Interrupt:
    return Interrupt.objects.get(pk=interrupt.pk)


def resumes(interrupt) -> list[Run]:
    return list(Run.objects.filter(parent=interrupt.run_id, resume_key__isnull=False))


def refusal(call, *args) -> Refusal:
    with pytest.raises(Refusal) as caught:
        call(*args)
    return caught.value


def test_a_decision_s_resume_is_held_for_the_undo_window_then_due():
    interrupt = raised()
    before = timezone.now()
    decisions.decide(interrupt, make.user(), "resolved", APPROVE)
    [resume] = resumes(interrupt)
    assert resume.status == "queued" and resume.retry_at >= before + timedelta(seconds=3)
    assert outbox.claim_due(10, "w") == []  # held: not due yet
    Run.objects.filter(pk=resume.pk).update(retry_at=timezone.now() - timedelta(milliseconds=1))  # the hold ends
    assert outbox.claim_due(10, "w") == [(resume.pk, True)]


def test_no_hold_sends_at_once(settings):
    settings.COUNTERSIGN_UNDO_SECONDS = 0
    interrupt = raised()
    decisions.decide(interrupt, make.user(), "resolved", APPROVE)
    [resume] = resumes(interrupt)
    assert resume.retry_at is None
    assert outbox.claim_due(10, "w") == [(resume.pk, True)]


def test_undo_withdraws_my_decision_and_the_queued_resume():
    interrupt, me = raised(), make.user()
    decided = decisions.decide(interrupt, me, "resolved", REJECT, comment="not today")
    assert len(resumes(interrupt)) == 1
    reopened = decisions.undo(interrupt, me)
    assert (reopened.status, reopened.closed_at) == ("pending", None)
    assert reopened.version == fresh(interrupt).version > interrupt.version
    assert Decision.objects.get(pk=decided.pk).superseded_at is not None
    assert resumes(interrupt) == [] and not Run.objects.filter(resume_key__isnull=False).exists()
    assert outbox.claim_due(10, "w") == []  # nothing reaches the agent
    # The trail: the supersession (which verify requires) and what was undone, in words.
    kinds = list(AuditEntry.objects.filter(decision_id=decided.pk).order_by("seq").values_list("kind", flat=True))
    assert kinds == ["decision", "decision.superseded", "decision.undone"]
    undone = AuditEntry.objects.get(kind=decisions.UNDONE)
    assert '"outcome":"Rejected"' in undone.content and f'"username":"{me.username}"' in undone.content
    assert verify.verify(save=False).ok


def test_deciding_again_after_an_undo_sends_the_new_answer_once():
    interrupt, me = raised(), make.user()
    decisions.decide(interrupt, me, "resolved", APPROVE)
    decisions.undo(interrupt, me)
    decisions.decide(interrupt, me, "resolved", APPROVE)  # the same answer: the same resume key, free again
    [resume] = resumes(interrupt)
    assert resume.input["resume"][0]["payload"] == APPROVE
    assert verify.verify(save=False).ok


def test_only_the_author_may_undo_and_nothing_undecided_can_be():
    interrupt, alice, bob = raised(), make.user(first_name="Alice"), make.user()
    problem = refusal(decisions.undo, interrupt, alice)
    assert (problem.code, problem.status) == ("NOT_DECIDED", 409)
    assert "still waits for one" in problem.message
    decisions.decide(interrupt, alice, "resolved", APPROVE)
    problem = refusal(decisions.undo, interrupt, bob)
    assert (problem.code, problem.status) == ("NOT_YOURS", 403)
    assert "decided by Alice" in problem.message
    assert fresh(interrupt).status == "resolved" and len(resumes(interrupt)) == 1


def test_after_a_process_took_the_resume_undo_is_too_late():
    interrupt, me = raised(), make.user()
    decisions.decide(interrupt, me, "resolved", APPROVE)
    [resume] = resumes(interrupt)
    Run.objects.filter(pk=resume.pk).update(retry_at=timezone.now() - timedelta(seconds=1))
    assert outbox.claim_due(10, "w") == [(resume.pk, True)]
    problem = refusal(decisions.undo, interrupt, me)
    assert (problem.code, problem.status) == ("ALREADY_SENT", 409)
    assert resume.run_id in problem.message and problem.details["run_id"] == resume.run_id
    assert fresh(interrupt).status == "resolved" and Run.objects.get(pk=resume.pk).status == "streaming"
    assert Decision.objects.get(interrupt=interrupt).superseded_at is None


def test_a_resume_that_was_tried_is_not_withdrawn():
    # Deferred after an unreachable agent: the agent never took it, but its log notes the try.
    interrupt, me = raised(), make.user()
    decisions.decide(interrupt, me, "resolved", APPROVE)
    [resume] = resumes(interrupt)
    Run.objects.filter(pk=resume.pk).update(retry_at=timezone.now() - timedelta(seconds=1))
    outbox.claim_due(10, "w")
    outbox.defer(Run.objects.get(pk=resume.pk), "w", "AGENT_UNREACHABLE", "refused")
    assert refusal(decisions.undo, interrupt, me).code == "ALREADY_SENT"


def test_in_a_batch_of_two_undo_before_and_after_the_batch_completes():
    run = make.run(status="interrupted")
    first, second, me = raised(run, "a"), raised(run, "b"), make.user()
    decisions.decide(first, me, "resolved", APPROVE)
    decisions.undo(first, me)  # nothing queued yet: only the decision goes
    assert fresh(first).status == "pending" and resumes(first) == []
    decisions.decide(first, me, "resolved", APPROVE)
    decisions.decide(second, me, "resolved", REJECT)
    assert len(resumes(first)) == 1
    decisions.undo(second, me)  # the decision that completed the batch: its resume goes too
    assert (fresh(first).status, fresh(second).status) == ("resolved", "pending")
    assert resumes(first) == []
    decisions.decide(second, me, "resolved", APPROVE)
    [resume] = resumes(first)
    assert [e["payload"] for e in resume.input["resume"]] == [APPROVE, APPROVE]


def test_undoing_the_first_of_a_complete_batch_withdraws_its_resume_too():
    run = make.run(status="interrupted")
    first, second, me, alice = raised(run, "a"), raised(run, "b"), make.user(), make.user()
    decisions.decide(first, me, "resolved", APPROVE)
    decisions.decide(second, alice, "resolved", APPROVE)
    decisions.undo(first, me)
    assert resumes(first) == [] and fresh(second).status == "resolved"


def test_under_a_quorum_only_my_approval_is_withdrawn():
    agent = make.agent()
    make.policy(agent=agent, required_approvals=2)
    interrupt = raised(agent=agent)
    alice, bob, carol = make.user(), make.user(), make.user()
    decisions.decide(interrupt, alice, "resolved", APPROVE)
    decisions.undo(interrupt, alice)  # still pending: my approval no longer counts
    assert fresh(interrupt).status == "pending" and decisions.approvals(interrupt) == []
    decisions.decide(interrupt, bob, "resolved", APPROVE)
    decisions.decide(interrupt, carol, "resolved", APPROVE)
    assert fresh(interrupt).status == "resolved" and len(resumes(interrupt)) == 1
    decisions.undo(interrupt, carol)
    assert fresh(interrupt).status == "pending" and resumes(interrupt) == []
    assert [d.user for d in decisions.approvals(interrupt)] == [bob]  # Bob's still counts
    decisions.decide(interrupt, alice, "resolved", APPROVE)
    [resume] = resumes(interrupt)
    attested = resume.input["resume"][0]["metadata"]["countersign"]["decisions"]
    assert [d["username"] for d in attested] == [bob.username, alice.username]
    assert verify.verify(save=False).ok


def test_an_interrupt_past_its_expiry_is_not_reopened_and_one_beside_an_expired_one_is():
    soon = timezone.now() + timedelta(minutes=5)
    interrupt, me = raised(expires_at=soon), make.user()
    decisions.decide(interrupt, me, "resolved", APPROVE)
    Interrupt.objects.filter(pk=interrupt.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert refusal(decisions.undo, interrupt, me).code == "EXPIRED"
    assert len(resumes(interrupt)) == 1  # the withdrawal rolled back with the refusal

    run = make.run(status="interrupted")
    decided, late = raised(run, "a"), raised(run, "b", expires_at=soon)
    decisions.decide(decided, me, "resolved", APPROVE)
    Interrupt.objects.filter(pk=late.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    decisions.expire_due()
    # The expiry completed the batch and queued its resume (C20); nothing took it yet, so the undo withdraws it.
    assert [e["status"] for e in resumes(decided)[0].input["resume"]] == ["resolved", "cancelled"]
    assert decisions.undo(decided, me).status == "pending"
    assert resumes(decided) == [] and Interrupt.objects.get(pk=late.pk).status == "expired"


def test_the_inbox_hears_of_an_undo(monkeypatch):
    heard = []
    monkeypatch.setattr(relay, "inbox_changed", lambda thread, seq, reason: heard.append(reason))
    interrupt, me = raised(), make.user()
    decisions.decide(interrupt, me, "resolved", APPROVE)
    decisions.undo(interrupt, me)
    assert heard == [relay.Reason.DECIDED, relay.Reason.REVISED]


def test_words_for_each_outcome():
    interrupt, me = raised(), make.user()
    words = [outcome_words(Decision(action=action)) for action in OUTCOME_WORDS]
    assert words == ["Approved", "Approved with edits", "Answered", "Rejected", "Dismissed"]
    # Decisions recorded before actions were are read from the answer.
    assert outcome_words(Decision(status="resolved", payload=REJECT)) == "Rejected"
    assert outcome_words(Decision(status="cancelled")) == "Dismissed"
    decisions.decide(interrupt, me, "resolved", REJECT)
    problem = refusal(decisions.decide, interrupt, make.user(first_name="Bob"), "resolved", APPROVE)
    assert (problem.details["decided_by_name"], problem.details["outcome"]) == (me.username, "Rejected")


# --- the hold's end wakes the supervisor ------------------------------------------------


class Listener:
    def __init__(self, loop):
        self.loop, self.woken = loop, []
        self.first = loop.create_future()

    def wake(self):
        self.woken.append(self.loop.time())
        if not self.first.done():
            self.first.set_result(None)

    def stop_stream(self, run_pk):
        pass

    def call_soon(self, callback, *args):
        self.loop.call_soon_threadsafe(callback, *args)
        return True


def test_the_end_of_the_hold_wakes_the_supervisor_without_waiting_for_a_poll():
    loop = asyncio.new_event_loop()
    listener = Listener(loop)
    wakeup.register(listener)
    try:
        started = loop.time()
        runs._wake_after(0.2)
        loop.run_until_complete(asyncio.wait_for(listener.first, 15))
    finally:
        wakeup.register(None)
        loop.close()
    # Only a wake reaches the listener (nothing polls here); the bound is a poll interval, so a loaded
    # machine's slow timer still passes while a wake that waited for the next poll would not.
    assert len(listener.woken) == 1 and 0.2 <= listener.woken[0] - started < 0.2 + 1.0


@committed
def test_a_held_resume_wakes_the_supervisor_after_commit(monkeypatch):
    after = []
    monkeypatch.setattr(runs, "_wake_after", after.append)
    interrupt = raised()
    decisions.decide(interrupt, make.user(), "resolved", APPROVE)
    assert after == [3]


# --- the race with the outbox taking the resume (both databases) -------------------------------


def _due(interrupt) -> Run:
    [resume] = resumes(interrupt)
    Run.objects.filter(pk=resume.pk).update(retry_at=timezone.now() - timedelta(seconds=1))
    return resume


class _InFlight(list):
    """An execute wrapper: the statements its thread has sent and not yet had answered."""

    def __call__(self, execute, sql, params, many, context):
        self.append(sql)
        try:
            return execute(sql, params, many, context)
        finally:
            self.remove(sql)


def _waits_for_a_lock(inflight: _InFlight) -> bool:
    """Whether the thread ``inflight`` watches is blocked on a lock another transaction holds."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity"
                           " WHERE datname = current_database() AND wait_event_type = 'Lock'")
            return cursor.fetchone()[0] > 0
    # SQLite's one writer: a transaction begins IMMEDIATE, and its BEGIN waits out the busy timeout.
    return any(sql.startswith("BEGIN") for sql in list(inflight))


def _in_thread(work):
    result = {"inflight": _InFlight()}

    def target():
        try:
            with connection.execute_wrapper(result["inflight"]):
                result["value"] = work()
        except Exception as problem:  # noqa: BLE001  (the test reads it)
            result["error"] = problem
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    return thread, result


@committed
def test_an_undo_waiting_behind_a_claim_is_told_it_is_too_late():
    interrupt, me = raised(), make.user()
    decisions.decide(interrupt, me, "resolved", APPROVE)
    resume = _due(interrupt)
    claimed, release = threading.Event(), threading.Event()

    def claim_and_hold():
        # claim_due's transaction, held open after its UPDATE (its own block is a savepoint in this one).
        with transaction.atomic():
            taken = outbox.claim_due(10, "w")
            claimed.set()
            release.wait(5)
        return taken

    thread, result = _in_thread(claim_and_hold)
    assert claimed.wait(5)
    undo_thread, undone = _in_thread(lambda: decisions.undo(interrupt, me))
    # The undo is waiting for the lock (PostgreSQL: the run's row; SQLite: the database).
    wait_for(lambda: _waits_for_a_lock(undone["inflight"]), timeout=15)
    release.set()
    thread.join(10)
    undo_thread.join(10)
    assert result["value"] == [(resume.pk, True)]
    assert isinstance(undone.get("error"), Refusal) and undone["error"].code == "ALREADY_SENT"
    assert Run.objects.get(pk=resume.pk).status == "streaming" and fresh(interrupt).status == "resolved"


@committed
def test_a_claim_during_an_undo_finds_nothing_to_send(monkeypatch):
    interrupt, me = raised(), make.user()
    decisions.decide(interrupt, me, "resolved", APPROVE)
    _due(interrupt)
    locked, release = threading.Event(), threading.Event()
    real_record = chain.record

    def slow_record(*args, **kwargs):
        # Inside the undo's transaction, after the resume's row was locked and deleted.
        locked.set()
        release.wait(5)
        return real_record(*args, **kwargs)

    monkeypatch.setattr(chain, "record", slow_record)
    undo_thread, undone = _in_thread(lambda: decisions.undo(interrupt, me))
    assert locked.wait(5)
    claim_thread, claimed = _in_thread(lambda: outbox.claim_due(10, "w"))
    # The claim ran while the undo held its lock: it skipped the locked row and finished, or it waits.
    wait_for(lambda: not claim_thread.is_alive() or _waits_for_a_lock(claimed["inflight"]), timeout=15)
    release.set()
    undo_thread.join(10)
    claim_thread.join(10)
    assert "error" not in undone and undone["value"].status == "pending"
    assert claimed.get("value") == [] and resumes(interrupt) == []


@committed
def test_racing_undos_and_claims_never_send_an_undone_decision():
    # Repeated: whichever wins, the outcome is one of two consistent ones.
    me = make.user()
    for attempt in range(6):
        interrupt = raised(interrupt_id=f"race-{attempt}")
        decisions.decide(interrupt, me, "resolved", APPROVE)
        resume = _due(interrupt)
        start = threading.Barrier(2)
        undo_thread, undone = _in_thread(
            lambda start=start, interrupt=interrupt: (start.wait(5), decisions.undo(interrupt, me))[1]
        )
        claim_thread, claimed = _in_thread(
            lambda start=start, attempt=attempt: (start.wait(5), outbox.claim_due(10, f"w-{attempt}"))[1]
        )
        undo_thread.join(10)
        claim_thread.join(10)
        if "error" in undone:
            assert undone["error"].code == "ALREADY_SENT"
            assert claimed["value"] == [(resume.pk, True)] and fresh(interrupt).status == "resolved"
        else:
            assert claimed.get("value") == [] and not Run.objects.filter(pk=resume.pk).exists()
            assert fresh(interrupt).status == "pending"
