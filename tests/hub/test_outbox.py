"""The outbox, in process: who streams each queued run, leases, take-overs, and retries with backoff."""

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from interrupts.hub import outbox, wakeup
from interrupts.live import relay
from interrupts.models import Event, Run, Thread

from .. import factories as make

# Each test in a transaction rolled back at its end (PostgreSQL truncates every table
# after a transactional test: four times slower); the few that need a real commit
# (other threads' connections, work done after commit) ask for it.
pytestmark = pytest.mark.django_db
committed = pytest.mark.django_db(transaction=True)


def queued(agent=None, resume=False, **fields) -> Run:
    thread = make.thread(agent=agent) if agent is not None else make.thread()
    if resume:
        fields.setdefault("resume_key", f"key-{thread.thread_id}")
    return make.run(thread, status="queued", **fields)


def streaming(worker="w-old", lease_in=30.0, **fields) -> Run:
    return make.run(status="streaming", claimed_by=worker,
                    lease_until=timezone.now() + timedelta(seconds=lease_in), **fields)


def pks(claimed):
    return [pk for pk, _resume in claimed]


# --- claim_due -----------------------------------------------------------------------------------


def test_a_claimed_run_streams_for_its_worker_under_a_lease(settings):
    settings.COUNTERSIGN_LEASE_SECONDS = 30
    run = queued()
    before = timezone.now()
    assert outbox.claim_due(5, "w-1") == [(run.pk, False)]
    run.refresh_from_db()
    assert (run.status, run.claimed_by) == ("streaming", "w-1")
    assert run.started_at >= before
    assert before + timedelta(seconds=29) < run.lease_until <= timezone.now() + timedelta(seconds=30)


def test_a_run_is_never_claimed_twice():
    run = queued()
    assert pks(outbox.claim_due(5, "w-1")) == [run.pk]
    assert outbox.claim_due(5, "w-2") == []
    assert Run.objects.get(pk=run.pk).claimed_by == "w-1"


def test_resumes_are_claimed_before_older_new_runs():
    older_new = queued()
    resume = queued(resume=True)
    assert outbox.claim_due(1, "w") == [(resume.pk, True)]
    assert outbox.claim_due(1, "w") == [(older_new.pk, False)]


def test_within_each_kind_the_oldest_goes_first():
    first, second, third = queued(), queued(), queued()
    assert pks(outbox.claim_due(2, "w")) == [first.pk, second.pk]
    assert pks(outbox.claim_due(2, "w")) == [third.pk]


def test_new_limit_keeps_slots_that_only_resumes_may_take():
    new_runs = [queued() for _ in range(3)]
    resume = queued(resume=True)
    claimed = outbox.claim_due(3, "w", new_limit=1)
    assert claimed == [(resume.pk, True), (new_runs[0].pk, False)]
    # Without a resume waiting, the reserved slots stay empty.
    assert outbox.claim_due(3, "w", new_limit=1) == [(new_runs[1].pk, False)]


def test_new_limit_never_raises_the_limit():
    runs = [queued() for _ in range(3)]
    assert pks(outbox.claim_due(1, "w", new_limit=5)) == [runs[0].pk]


def test_an_agent_streams_at_most_its_share_across_every_process(settings):
    settings.COUNTERSIGN_MAX_AGENT_STREAMS = 2
    busy = make.agent()
    make.run(make.thread(agent=busy), status="streaming", claimed_by="another-process")
    waiting = [queued(busy) for _ in range(3)]
    other = queued()
    claimed = pks(outbox.claim_due(10, "w"))
    assert claimed == [waiting[0].pk, other.pk]
    assert Run.objects.filter(agent=busy, status="streaming").count() == 2
    # Its runs wait for a stream of it to end, then go in order.
    assert outbox.claim_due(10, "w") == []
    Run.objects.filter(pk=waiting[0].pk).update(status="succeeded")
    assert pks(outbox.claim_due(10, "w")) == [waiting[1].pk]


def test_resumes_count_against_the_agent_s_share_too(settings):
    settings.COUNTERSIGN_MAX_AGENT_STREAMS = 1
    agent = make.agent()
    resume = queued(agent, resume=True)
    queued(agent)
    assert outbox.claim_due(10, "w") == [(resume.pk, True)]


def test_a_resume_claimed_at_once_keeps_to_its_agent_s_share_and_order(settings):
    settings.COUNTERSIGN_MAX_AGENT_STREAMS = 1
    agent = make.agent()
    resume = queued(agent, resume=True, retry_at=timezone.now() + timedelta(days=1))  # held: no round claims it

    def claim_now(run):
        with transaction.atomic():
            return outbox.claim_now(run.pk, agent.pk, run.created_at, "w")

    assert claim_now(resume)
    taken = Run.objects.get(pk=resume.pk)
    assert (taken.status, taken.claimed_by, taken.retry_at) == ("streaming", "w", None)
    # The agent streams its one run now: another is left for a round once that one ends.
    other = queued(agent, resume=True)
    assert not claim_now(other)
    assert Run.objects.get(pk=other.pk).status == "queued"
    # An older resume of the agent is due: the round takes it first, as claim_due promises.
    settings.COUNTERSIGN_MAX_AGENT_STREAMS = 5
    newer = queued(agent, resume=True, retry_at=timezone.now() + timedelta(days=1))
    assert not claim_now(newer)
    # Taken by someone else meanwhile: not taken again.
    assert pks(outbox.claim_due(10, "w-2")) == [other.pk]
    assert claim_now(newer)
    assert not claim_now(other) and Run.objects.get(pk=other.pk).claimed_by == "w-2"


def test_a_run_waiting_for_its_retry_time_is_not_due():
    later = queued(attempts=1, retry_at=timezone.now() + timedelta(minutes=5))
    due = queued(attempts=1, retry_at=timezone.now() - timedelta(seconds=1))
    claimed = outbox.claim_due(10, "w")
    assert claimed == [(due.pk, False)]
    assert Run.objects.get(pk=due.pk).retry_at is None  # claimed: no longer waiting
    assert Run.objects.get(pk=later.pk).status == "queued"


def test_claiming_a_run_that_waited_for_its_agent_tells_the_inbox_at_its_thread_s_seq(monkeypatch):
    told, real = [], relay.inbox_changed
    monkeypatch.setattr(relay, "inbox_changed", lambda *args: (told.append(args), real(*args)))
    retried = queued(attempts=2, retry_at=timezone.now() - timedelta(seconds=1))
    Thread.objects.filter(pk=retried.thread_id).update(last_seq=7)  # the inbox is told up to its last event
    first_try = queued()
    assert sorted(pks(outbox.claim_due(10, "w"))) == sorted([retried.pk, first_try.pk])
    assert told == [(retried.thread_id, 7, relay.Reason.DELIVERY)]


@committed
def test_racing_claims_take_each_run_once():
    runs = [queued() for _ in range(8)]
    start = threading.Barrier(4)

    def claim(n):
        start.wait()
        try:
            return pks(outbox.claim_due(3, f"w-{n}"))
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        taken = [pk for claimed in pool.map(claim, range(4)) for pk in claimed]
    assert sorted(taken) == sorted(run.pk for run in runs)
    owners = {run.pk: run.claimed_by for run in Run.objects.filter(pk__in=taken)}
    assert all(owner.startswith("w-") for owner in owners.values())


# --- renew, lapsed, take_over --------------------------------------------------------------------


def test_renew_extends_only_the_holder_s_lease(settings):
    settings.COUNTERSIGN_LEASE_SECONDS = 60
    run = streaming("w-1", lease_in=1)
    assert outbox.renew(run.pk, "w-2") is False
    assert Run.objects.get(pk=run.pk).lease_until < timezone.now() + timedelta(seconds=2)
    assert outbox.renew(run.pk, "w-1") is True
    assert Run.objects.get(pk=run.pk).lease_until > timezone.now() + timedelta(seconds=58)


def test_a_run_that_ended_cannot_be_renewed():
    run = streaming("w-1")
    Run.objects.filter(pk=run.pk).update(status="failed")
    assert outbox.renew(run.pk, "w-1") is False


def test_lapsed_lists_streaming_runs_whose_lease_ran_out():
    gone = streaming(lease_in=-1)
    unleased = make.run(status="streaming", claimed_by="w", lease_until=None)
    streaming(lease_in=30)
    make.run(status="queued")
    make.run(status="failed", lease_until=timezone.now() - timedelta(minutes=1))
    assert sorted(run.pk for run in outbox.lapsed(timezone.now())) == sorted([gone.pk, unleased.pk])


def test_of_two_processes_taking_over_a_lapsed_run_one_wins():
    run = streaming("dead-process", lease_in=-1)
    [seen_by_a] = outbox.lapsed(timezone.now())
    [seen_by_b] = outbox.lapsed(timezone.now())
    assert outbox.take_over(seen_by_a, "w-a") is True
    assert outbox.take_over(seen_by_b, "w-b") is False
    assert Run.objects.get(pk=run.pk).claimed_by == "w-a"
    assert Run.objects.get(pk=run.pk).lease_until > timezone.now()


@committed
def test_racing_take_overs_have_exactly_one_winner():
    run = streaming("dead-process", lease_in=-1)
    start = threading.Barrier(4)

    def take(n):
        [seen] = outbox.lapsed(timezone.now())
        start.wait()
        try:
            return outbox.take_over(seen, f"w-{n}")
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        won = list(pool.map(take, range(4)))
    assert won.count(True) == 1
    assert Run.objects.get(pk=run.pk).claimed_by == f"w-{won.index(True)}"


def test_a_lease_that_was_renewed_meanwhile_is_not_taken_over():
    run = streaming("slow-process", lease_in=-1)
    [seen] = outbox.lapsed(timezone.now())
    assert outbox.renew(run.pk, "slow-process")  # it was alive after all
    assert outbox.take_over(seen, "w") is False
    assert Run.objects.get(pk=run.pk).claimed_by == "slow-process"


# --- defer, retry_delay, retry_now ---------------------------------------------------------------


def test_retry_delay_doubles_up_to_its_cap(settings):
    settings.COUNTERSIGN_RETRY_BASE = 1.5
    settings.COUNTERSIGN_RETRY_MAX_DELAY = 20
    assert [outbox.retry_delay(n) for n in range(1, 7)] == [1.5, 3, 6, 12, 20, 20]


def test_a_deferred_run_is_queued_again_with_backoff_and_a_note_in_its_log(settings):
    settings.COUNTERSIGN_RETRY_BASE = 10
    run = streaming("w-1", attempts=2)
    before = timezone.now()
    assert outbox.defer(run, "w-1", "HTTP_ERROR", "The agent answered HTTP 503") == 3
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.claimed_by, stored.lease_until, stored.started_at) == ("queued", "", None, None)
    assert stored.attempts == 3 and stored.last_error == "HTTP_ERROR: The agent answered HTTP 503"
    # Third failure: 10 s doubled twice.
    assert before + timedelta(seconds=40) <= stored.retry_at <= timezone.now() + timedelta(seconds=40)
    assert (run.status, run.attempts, run.retry_at) == ("queued", 3, stored.retry_at)
    [note] = Event.objects.filter(run=run)
    assert (note.type, note.from_agent, note.payload["name"]) == ("CUSTOM", False, relay.Note.DELIVERY_FAILED)
    assert note.payload["value"] == {"runId": run.run_id, "attempt": 3, "code": "HTTP_ERROR",
                                     "message": "The agent answered HTTP 503",
                                     "retryAt": stored.retry_at.isoformat()}
    assert stored.awaiting_agent and stored.delivery == "run pending — agent unreachable, attempt 3"


def test_a_run_another_process_holds_is_not_deferred():
    run = streaming("w-1")
    assert outbox.defer(run, "w-2", "CONNECT_ERROR", "refused") is None
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.claimed_by, stored.attempts) == ("streaming", "w-1", 0)
    assert not Event.objects.filter(run=run).exists()


def test_a_deferred_run_waits_for_its_time_then_is_claimed_again(settings):
    settings.COUNTERSIGN_RETRY_BASE = 60
    run = queued()
    outbox.claim_due(1, "w-1")
    outbox.defer(Run.objects.get(pk=run.pk), "w-1", "CONNECT_ERROR", "refused")
    assert outbox.claim_due(1, "w-1") == []
    Run.objects.filter(pk=run.pk).update(retry_at=timezone.now() - timedelta(seconds=1))
    assert outbox.claim_due(1, "w-2") == [(run.pk, False)]


@committed
def test_retry_now_makes_a_waiting_run_due_at_once_and_wakes_the_supervisor(settings):
    settings.COUNTERSIGN_RETRY_BASE = 60
    woken = []

    class Listener:
        def wake(self):
            woken.append(connection.in_atomic_block)

        def stop_stream(self, run_pk):
            pass

    run = streaming("w-1")
    outbox.defer(run, "w-1", "CONNECT_ERROR", "refused")
    assert outbox.claim_due(1, "w-1") == []
    before = wakeup.registered()
    wakeup.register(Listener())
    try:
        assert outbox.retry_now(run, make.user(username="ops")) is True
    finally:
        wakeup.register(before)
    assert woken == [False]
    note = Event.objects.filter(run=run).order_by("seq").last()
    assert note.payload["name"] == relay.Note.RETRY_REQUESTED
    assert note.payload["value"] == {"runId": run.run_id, "by": "ops"}
    assert outbox.claim_due(1, "w-1") == [(run.pk, False)]


def test_retry_now_refuses_a_run_that_is_not_waiting_for_its_agent():
    fresh = queued()  # queued, never failed: it is due anyway
    assert outbox.retry_now(fresh) is False
    assert outbox.retry_now(streaming()) is False
    assert not Event.objects.exists()


# --- the agent's capacity, for the gateway -------------------------------------------------------


def test_refuse_if_agent_full_counts_every_streaming_run_of_the_agent(settings):
    settings.COUNTERSIGN_MAX_AGENT_STREAMS = 2
    agent = make.agent()
    make.run(make.thread(agent=agent), status="streaming")
    # Called under the gateway's transaction: it locks the agent's row.
    with transaction.atomic():
        outbox.refuse_if_agent_full(agent)  # one of two: room left
    make.run(make.thread(agent=agent), status="streaming")
    with pytest.raises(outbox.Refusal) as refused, transaction.atomic():
        outbox.refuse_if_agent_full(agent)
    assert refused.value.code == "AGENT_AT_CAPACITY" and refused.value.status == 409
