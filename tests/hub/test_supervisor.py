"""The supervisor, in process: a tick claims and streams queued runs from a real HTTP agent; wake() starts one now.

The agent is tests/e2e/scripted_agent.py's on a loopback port; the supervisor
runs on the test's event loop, as on daphne's under ``manage.py serve``.
"""

import asyncio
import threading
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from interrupts.hub import decisions, runs, supervisor, wakeup
from interrupts.models import Event, Interrupt, Run

from .. import factories as make
from ..e2e.scripted_agent import Gate, ScriptedAgent
from ..waiting import until
from .conftest import WORKER

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def agent():
    served = ScriptedAgent().start()
    yield served
    served.stop()


@pytest.fixture(autouse=True)
def quick(settings):
    settings.COUNTERSIGN_AFTER_TERMINAL_GRACE = 0.3
    # Long enough that only a wake-up, never the poll, explains a prompt tick.
    settings.COUNTERSIGN_POLL_INTERVAL = 60


class Ticks:
    """Counts the ticks a supervisor's loop has finished, so a test waits for one instead of guessing its length."""

    def __init__(self, made: supervisor.Supervisor) -> None:
        self.started = self.done = 0
        self.changed = asyncio.Condition()
        tick = made.tick

        async def counted() -> None:
            self.started += 1
            try:
                await tick()
            finally:
                async with self.changed:
                    self.done += 1
                    self.changed.notify_all()

        made.tick = counted  # run_forever calls self.tick: the real one, counted

    async def reach(self, count: int, timeout: float = 10) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: self.done >= count), timeout)


async def settled(made: supervisor.Supervisor) -> None:
    """Wait for every stream the supervisor started (not its own loop, which never ends)."""
    streams = [task for task in made.tasks if task.get_name().startswith("stream-")]
    await asyncio.wait_for(asyncio.gather(*streams), 20)


@sync_to_async
def queued_on(url: str, **fields) -> Run:
    """A queued run of a new agent at ``url``, written without waking anyone."""
    return make.run(make.thread(agent=make.agent(url=url)), status="queued", **fields)


@sync_to_async
def status_of(run_pk: int) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_pk)


async def test_one_tick_claims_a_queued_run_and_streams_it_to_its_end(agent, boss):
    run = await queued_on(f"{agent.url}/approve/")
    await boss.tick()
    assert boss.streaming() == 1
    claimed = await sync_to_async(Run.objects.get)(pk=run.pk)
    assert (claimed.status, claimed.claimed_by) == ("streaming", WORKER)
    await settled(boss)
    assert await status_of(run.pk) == "interrupted"
    assert await Interrupt.objects.filter(run_id=run.pk, status="pending").acount() == 1
    assert boss.streaming() == 0  # its slot is free again
    assert agent.calls[("approve", run.thread.thread_id)] == 1
    # Nothing is claimed twice: the next tick finds no work.
    await boss.tick()
    assert boss.streaming() == 0 and agent.calls[("approve", run.thread.thread_id)] == 1


async def test_a_tick_leaves_the_resume_slots_to_resumes(agent, boss, settings):
    settings.COUNTERSIGN_MAX_STREAMS = 5
    settings.COUNTERSIGN_MAX_AGENT_STREAMS = 4
    assert supervisor.resume_slots() == 1
    url = f"{agent.url}/approve/"

    @sync_to_async
    def six_new_runs_of_one_thread_each():
        row = make.agent(url=url)
        return [make.run(make.thread(agent=row), status="queued") for _ in range(6)]

    made = await six_new_runs_of_one_thread_each()
    await boss.tick()
    assert boss.streaming() == 4  # the fifth slot waits for a resume
    assert boss.room() == (1, 0)
    await settled(boss)
    statuses = [await status_of(run.pk) for run in made]
    assert statuses.count("interrupted") == 4 and statuses.count("queued") == 2


async def test_a_tick_settles_a_run_whose_process_died(boss):
    # Sent (the delivery record says so) to an agent that does not dedupe: a person decides.
    run = await sync_to_async(make.run)(status="streaming", claimed_by="dead-process", sent_at=timezone.now(),
                                        lease_until=timezone.now() - timedelta(seconds=1))
    await boss.tick()
    ended = await sync_to_async(Run.objects.get)(pk=run.pk)
    assert (ended.status, ended.error_code) == ("failed", "WORKER_LOST")
    assert "dead-process" in ended.error_message and "may have acted" in ended.error_message


async def test_a_tick_expires_interrupts_whose_time_passed(boss):
    interrupt = await sync_to_async(make.interrupt)(expires_at=timezone.now() - timedelta(seconds=1))
    await boss.tick()
    assert await sync_to_async(lambda: Interrupt.objects.get(pk=interrupt.pk).status)() == "expired"


async def test_a_tick_escalates_a_missed_target_and_lapses_an_idle_claim(boss, settings):
    settings.COUNTERSIGN_CLAIM_IDLE_SECONDS = 60
    settings.COUNTERSIGN_SWEEP_INTERVAL = 0.0

    def arrange():
        from django.contrib.auth.models import Group

        agent = make.agent()
        make.policy(agent=agent, target_minutes=5, backup_group=Group.objects.create(name="backup"))
        late = make.interrupt(make.run(make.thread(agent=agent)))
        claimed = make.interrupt()
        Interrupt.objects.filter(pk=late.pk).update(created_at=timezone.now() - timedelta(minutes=6))
        Interrupt.objects.filter(pk=claimed.pk).update(claimed_by=make.user(), claimed_at=timezone.now(),
                                                       claim_renewed_at=timezone.now() - timedelta(seconds=61))
        return late, claimed

    late, claimed = await sync_to_async(arrange)()
    await boss.tick()
    assert await sync_to_async(lambda: Interrupt.objects.get(pk=late.pk).escalated_to.name)() == "backup"
    assert await sync_to_async(lambda: Interrupt.objects.get(pk=claimed.pk).claimed_by_id)() is None


async def test_wake_from_another_thread_starts_a_tick_at_once(agent, boss):
    ticks = Ticks(boss)
    boss.start()
    await ticks.reach(1)  # its first tick found nothing; the next poll is a minute away
    run = await queued_on(f"{agent.url}/approve/")
    # Nobody told it: a wake-up would have reached the loop before this line (call_soon_threadsafe is
    # first in, first out), and would show as set, or as a second tick begun.
    assert not boss.wakeup.is_set() and ticks.started == 1
    assert await status_of(run.pk) == "queued"

    waker = threading.Thread(target=wakeup.wake)
    waker.start()
    waker.join()
    await ticks.reach(2)  # fails after 10 s: the wake-up did not start a tick
    await settled(boss)
    assert await status_of(run.pk) == "interrupted"


async def test_a_run_queued_by_a_request_wakes_the_running_supervisor_after_commit(agent, boss):
    ticks = Ticks(boss)
    boss.start()
    await ticks.reach(1)  # its first tick found nothing; the next poll is a minute away
    agent_row = await sync_to_async(make.agent)(url=f"{agent.url}/approve/")
    run = await sync_to_async(runs.start_run)(agent_row, message="go")  # commits, then wakes
    await ticks.reach(2)  # fails after 10 s: the queued run was not picked up
    await settled(boss)
    assert await status_of(run.pk) == "interrupted"


async def test_an_operator_stops_a_stream_of_this_process_at_once(agent, boss, settings):
    settings.COUNTERSIGN_IDLE_TIMEOUT = 30  # the agent's silence alone would not end it soon
    agent.gate = gate = Gate()  # the agent holds its stream open after RUN_STARTED until the test opens it
    boss.start()
    run = await queued_on(f"{agent.url}/gated/")
    wakeup.wake()

    @sync_to_async
    def started() -> bool:
        return Event.objects.filter(run_id=run.pk, type="RUN_STARTED").exists()

    try:
        await until(started)
        stream = next(task for task in boss.tasks if task.get_name() == f"stream-{run.pk}")
        assert await sync_to_async(runs.cancel)(run, await sync_to_async(make.user)(is_staff=True))
        await asyncio.wait_for(stream, 10)
        assert gate.waiting == 1, "the stream ended only because the agent let it go"
    finally:
        gate.open()
        agent.gate = None
    log = await sync_to_async(list)(Event.objects.filter(run_id=run.pk).order_by("seq").values_list("type", flat=True))
    assert log == ["RUN_STARTED", "RUN_ERROR"]  # nothing written after the operator's ending
    ended = await sync_to_async(Run.objects.get)(pk=run.pk)
    assert ended.error_code == "CANCELLED_BY_OPERATOR"


async def test_a_stopped_supervisor_is_no_longer_woken(boss):
    boss.start()
    assert wakeup.registered() is not None and wakeup.registered().supervisor is boss
    await boss.stop()
    assert wakeup.registered() is None


# --- a resume handed over by its acknowledgement ---------------------------------------------------------


async def interrupted_on(agent, boss, path: str) -> Interrupt:
    """A run of a new agent at ``path`` streamed by ``boss`` to its interrupt; that interrupt, pending."""
    run = await queued_on(f"{agent.url}/{path}/")
    await boss.tick()
    await settled(boss)
    return await Interrupt.objects.select_related("run__thread").aget(run_id=run.pk, status="pending")


@sync_to_async(thread_sensitive=False)
def decided_and_acknowledged(interrupt: Interrupt) -> None:
    """Approved, its reply sent (``unsent``, then ``acknowledge``), on a thread of its own as after a reply."""
    decision = decisions.decide(interrupt, make.user(), "resolved", {"approved": True}, unsent=True)
    decisions.acknowledge([decision])


async def test_an_acknowledged_resume_goes_to_this_process_s_supervisor_without_a_round(agent, boss, settings):
    """No hold for undo: the acknowledgement claims the resume and hands it over, read, in its one transaction."""
    settings.COUNTERSIGN_UNDO_SECONDS = 0
    interrupt = await interrupted_on(agent, boss, "gated")
    agent.gate = gate = Gate()  # the resume's stream holds after RUN_STARTED: it cannot end unseen
    boss.wakeup.clear()  # set when the run's stream ended
    ticks = Ticks(boss)
    boss.start()
    await ticks.reach(1)  # its first tick found nothing; the next poll is a minute away
    try:
        await decided_and_acknowledged(interrupt)
        await until(lambda: gate.waiting == 1)  # the agent is reading the resume
        assert ticks.started == 1, "a round was woken to claim the resume"
        resume = await Run.objects.aget(parent_id=interrupt.run_id, resume_key__isnull=False)
        assert (resume.status, resume.claimed_by) == ("streaming", WORKER)
        assert boss.streaming() == 1  # in the slot the acknowledgement held
    finally:
        gate.open()
        agent.gate = None
    await settled(boss)
    assert await status_of(resume.pk) == "succeeded"
    assert boss.streaming() == 0
    assert agent.calls[("gated", interrupt.run.thread.thread_id)] == 2  # the run, then its resume, once


async def test_with_no_slot_free_an_acknowledged_resume_waits_for_a_round(agent, boss, settings):
    settings.COUNTERSIGN_UNDO_SECONDS = 0
    interrupt = await interrupted_on(agent, boss, "approve")
    settings.COUNTERSIGN_MAX_STREAMS = 1
    boss.wakeup.clear()
    ticks = Ticks(boss)
    boss.start()
    await ticks.reach(1)
    taken = boss.hold_now()  # the process's one slot, busy
    assert taken is not None and boss.hold_now() is None
    await decided_and_acknowledged(interrupt)
    await ticks.reach(2)  # woken instead, and found no room either
    resume = await Run.objects.aget(parent_id=interrupt.run_id, resume_key__isnull=False)
    assert (resume.status, resume.retry_at) == ("queued", None)  # due: the next round with room takes it
    boss.release(taken)
    await ticks.reach(3)
    await settled(boss)
    assert await status_of(resume.pk) == "succeeded"


async def test_a_slot_is_held_for_a_thread_only_while_it_waits_and_never_for_the_loop_itself(boss):
    ticks = Ticks(boss)
    boss.start()
    await ticks.reach(1)  # while a round claims, its room counts as taken: none to hold
    assert wakeup.hold_slot() is None  # asked on the loop, which would wait for itself
    answered, held = threading.Event(), []

    def ask() -> None:
        held.append(wakeup.hold_slot())
        answered.set()

    asker = threading.Thread(target=ask)
    asker.start()
    answered.wait(10)  # the loop, blocked here, cannot answer: the asker gives up (HANDOFF_WAIT)
    asker.join()
    assert held == [None]
    # Answered: the slot is held until it is given back. The loop answers in order, so the request
    # given up on came first: it held none (one slot, not two).
    handoff = await sync_to_async(wakeup.hold_slot, thread_sensitive=False)()
    assert handoff is not None and handoff.worker == WORKER
    assert boss.streaming() == 1, "a slot nobody waits for was held"
    handoff.give_back()
    await until(lambda: boss.streaming() == 0)


async def test_a_slot_given_back_wakes_the_supervisor_only_when_a_round_was_short_of_room(boss, settings):
    ticks = Ticks(boss)
    boss.start()
    await ticks.reach(1)  # found nothing, with room to spare
    held = boss.hold_now()
    boss.give_back(held)
    assert boss.streaming() == 0 and not boss.wakeup.is_set()  # nothing waits for it: no round for nothing
    settings.COUNTERSIGN_MAX_STREAMS = 1
    held = boss.hold_now()
    boss.wakeup.set()
    await ticks.reach(2)  # a round with no room: what is due waits
    boss.give_back(held)
    assert boss.wakeup.is_set()


async def test_a_run_handed_to_a_stopped_supervisor_is_left_to_its_lease(boss):
    boss.start()
    held = boss.hold_now()
    await boss.stop()
    assert boss.hold_now() is None
    boss.handed_over(12345, held)  # nothing would stop the stream: it never starts
    assert boss.streaming() == 0
    assert not [task for task in boss.tasks if task.get_name().startswith("stream-")]
