"""The per-process owner of background work: streams, queued resumes, expiry, escalation, lapsed claims.

``manage.py serve`` starts one ``Supervisor`` on daphne's event loop. It
claims queued runs that are due (row locks: with several processes each run
goes to exactly one) and streams them, closes interrupts whose expiry passed, and
settles runs whose streaming process died (their claim lapsed: ``streaming.recover``
ends, re-sends or fails each, as the outbox's contract says). Requests never
do this work: they commit a row and call ``wakeup.wake()``, which this
supervisor registered with when it started; other processes find the row on
their next poll. A decision's acknowledgement that lets a resume go at once
claims it for this process in its own transaction and hands it over, read,
in a slot held for it (``wakeup.hold_slot``): the stream is still this loop's.

Slots: a process streams at most COUNTERSIGN_MAX_STREAMS runs at once, hub and
gateway runs alike. ``resume_slots()`` of them are kept for resumes (runs
sending decisions back): new runs never take those, so a queued resume is
never starved by endless new runs; it may still use any free slot.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
import os
import socket
import uuid
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.utils import timezone

from ..conf import PLANNER_STATISTICS_EVERY, settings
from ..models import Run
from . import claims, dbthreads, decisions, escalation, outbox, statistics, streaming, wakeup
from .notify import rounds

logger = logging.getLogger(__name__)

# Identifies this process in run claims; unique even across restarts.
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

# How long a thread handing a run over waits for the loop to say whether a slot is free: past it, the
# run goes the usual way (due, and the supervisor woken) rather than delaying that thread.
HANDOFF_WAIT = 0.05


def resume_slots() -> int:
    """How many of a process's stream slots only resumes may use: a fifth, at least one."""
    return max(1, settings.COUNTERSIGN_MAX_STREAMS // 5)


@dataclass(eq=False)
class Slot:
    """One of this process's COUNTERSIGN_MAX_STREAMS, held from reservation until its stream ends."""

    resume: bool


def ensure() -> Supervisor:
    """This process's supervisor, started on the running loop if none runs yet.

    ``manage.py serve`` starts one at boot; a server without that hook (for
    instance ``runserver``) gets one at the first request that needs it.
    """
    current = wakeup.registered()
    return current.supervisor if isinstance(current, _Listener) else Supervisor().start_and_return()


# A round's database work, each in one trip to the shared database thread (a trip costs more than
# an idle round's queries), and its connection given back after: PostgreSQL's to the pool.
_claim_due = dbthreads.released(outbox.claim_due)


@dbthreads.released
def _round(sweep: bool, analyze: bool = False) -> list:
    """Expire due interrupts, and every sweep interval lapse what is overdue; the runs whose lease lapsed."""
    decisions.expire_due()
    if sweep:
        escalation.escalate_due()
        escalation.warn_expiring()
        claims.lapse_due()
        # Decisions whose process died before telling their reviewer: taken back, never sent.
        decisions.drop_unacknowledged()
    lapsed = outbox.lapsed(timezone.now())
    if analyze:
        statistics.refresh()  # last: the planner's statistics may fail (a busy database) and nothing waits on them
    return lapsed


class Supervisor:
    def __init__(self, worker: str = WORKER_ID) -> None:
        self.worker = worker
        self.loop = asyncio.get_running_loop()
        self.wakeup = asyncio.Event()
        # Strong references: the event loop keeps only weak ones to tasks.
        self.tasks: set[asyncio.Task] = set()
        # Stream slots held (by a stream, or by a gateway request about to start one).
        self.slots: set[Slot] = set()
        # While a claim is in flight, the room it may fill counts as taken, and
        # a gateway request that finds no room waits for the claim to finish.
        self.claiming: tuple[int, int] = (0, 0)
        self.claimed = asyncio.Event()
        self.claimed.set()
        # Per streaming run: set to make it stop now (an operator ended it).
        self.stops: dict[int, asyncio.Event] = {}
        # When escalation and lapsed claims were last swept (every COUNTERSIGN_SWEEP_INTERVAL).
        self.swept_at = self.loop.time()
        # When SQLite's planner statistics were last refreshed (None: at the first round).
        self.analyzed_at: float | None = None
        # Whether the last claim may have left due runs for want of room: a slot freed then is looked at.
        self.backlog = False
        # Set by ``stop``: a run handed over afterwards is not streamed (its claim lapses, recovery sends it).
        self.stopped = False

    def start_and_return(self) -> Supervisor:
        self.start()
        return self

    def start(self) -> asyncio.Task:
        """Start the supervisor's loop on the running event loop and make it this process's."""
        wakeup.register(_Listener(self))
        # Webhooks and emails in a loop of their own: a slow receiver or mail server never delays a tick.
        self._spawn(rounds.run_forever(self.worker), "countersign-notify")
        return self._spawn(self.run_forever(), "countersign-supervisor")

    async def run_forever(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad tick must not stop background work for good
                logger.exception("supervisor tick failed")
            try:
                await asyncio.wait_for(self.wakeup.wait(), settings.COUNTERSIGN_POLL_INTERVAL)
            except TimeoutError:
                pass
            self.wakeup.clear()

    async def tick(self) -> None:
        """One round: claim and stream queued runs, expire due interrupts, fail lost runs.

        Claiming first: a wake-up is nearly always a run just queued (a
        decision's resume) that its agent is waiting for. A lost run settled
        after the claim frees its agent's stream: the next round, at once, may use it.
        """
        await self._claim()
        sweep = self.loop.time() - self.swept_at >= settings.COUNTERSIGN_SWEEP_INTERVAL
        if sweep:
            self.swept_at = self.loop.time()
        analyze = self.analyzed_at is None or self.loop.time() - self.analyzed_at >= PLANNER_STATISTICS_EVERY
        if analyze:
            self.analyzed_at = self.loop.time()
        for run in await sync_to_async(_round)(sweep, analyze):
            if await sync_to_async(outbox.take_over)(run, self.worker):
                await sync_to_async(streaming.recover)(run, self.worker)
                self.wakeup.set()

    async def _claim(self) -> None:
        room, new_room = self.room()
        if room <= 0:
            self.backlog = True
            return
        self.claiming, self.claimed = (room, new_room), asyncio.Event()
        try:
            claimed = await sync_to_async(_claim_due)(room, self.worker, new_limit=new_room)
        finally:
            self.claiming = (0, 0)
            self.claimed.set()
        self.backlog = len(claimed) >= room or sum(1 for _, is_resume in claimed if not is_resume) >= new_room
        for run_pk, is_resume in claimed:
            slot = Slot(resume=is_resume)
            self.slots.add(slot)
            self.stream(run_pk, slot=slot)
        if claimed:
            # The streams' first reads go before the rest of the round's: every
            # sync_to_async call here waits its turn on the same one thread.
            await asyncio.sleep(0)

    def room(self) -> tuple[int, int]:
        """Free slots: (for a resume, for a new run). New runs never take the resume_slots()."""
        claiming, claiming_new = self.claiming
        total = settings.COUNTERSIGN_MAX_STREAMS - len(self.slots) - claiming
        new = (settings.COUNTERSIGN_MAX_STREAMS - resume_slots()
               - sum(1 for slot in self.slots if not slot.resume) - claiming_new)
        return max(total, 0), max(min(total, new), 0)

    async def reserve(self, resume: bool) -> Slot | None:
        """Hold a slot for a stream about to start (the gateway's); None when this process is full.

        The check and the taking are one synchronous step on the loop, so two
        requests can never take the last slot together. Full only because a
        claim is in flight: wait for it, then look again.
        """
        while True:
            slot = self._take(resume)
            if slot is not None or self.claimed.is_set():
                return slot
            await self.claimed.wait()

    def hold_now(self) -> Slot | None:
        """A slot for a resume a service claims for this process (``wakeup.hold_slot``), if one is free now.

        On the loop, like ``reserve``, but never waits: a claim in flight counts as taken.
        """
        return None if self.stopped else self._take(resume=True)

    def _take(self, resume: bool) -> Slot | None:
        """A free slot (one of those kept for resumes only if ``resume``), taken; None when there is none."""
        total, new = self.room()
        if (total if resume else new) <= 0:
            return None
        slot = Slot(resume=resume)
        self.slots.add(slot)
        return slot

    def handed_over(self, run: Run | int, slot: Slot) -> None:
        """Stream ``run``, claimed for this process in ``slot`` (``hold_now``) by whoever holds it."""
        if self.stopped:  # nothing would stop this stream: its claim lapses instead, and recovery sends it
            self.slots.discard(slot)
            return
        self.stream(run, slot=slot)

    def give_back(self, slot: Slot) -> None:
        """A slot ``hold_now`` held and nothing used: free again, and looked at only if runs may wait for it."""
        self.slots.discard(slot)
        if self.backlog:
            self.wakeup.set()

    def release(self, slot: Slot) -> None:
        """Give back a slot whose stream did not start (a refused or replayed gateway request)."""
        self.slots.discard(slot)
        self.wakeup.set()

    def streaming(self) -> int:
        """Stream slots held now (streams, and gateway requests about to start one)."""
        return len(self.slots)

    def stream(self, run: Run | int, listener: asyncio.Queue | None = None, slot: Slot | None = None) -> asyncio.Task:
        """Stream a run this process has claimed (its pk, or the run read since), in the background.

        The task survives the caller. ``slot`` (from ``reserve``, ``hold_now`` or a claim) is
        released when the stream ends.
        """
        run_pk = run if isinstance(run, int) else run.pk
        if slot is None:  # a caller that reserved nothing still holds a slot while it streams
            slot = Slot(resume=True)
            self.slots.add(slot)
        stop = self.stops[run_pk] = asyncio.Event()
        task = self._spawn(streaming.stream_run(run, self.worker, listener, stop), f"stream-{run_pk}")
        task.add_done_callback(functools.partial(self._done, run_pk, slot))
        return task

    def stop_stream(self, run_pk: int) -> None:
        """Make this process's stream of ``run_pk`` stop at once, if it has one (on the loop)."""
        stop = self.stops.get(run_pk)
        if stop is not None:
            stop.set()

    def _spawn(self, coroutine, name: str) -> asyncio.Task:
        # A fresh context: a task started from a request must not inherit the
        # request's asgiref executor, which quits when the response is done.
        task = self.loop.create_task(coroutine, name=name, context=contextvars.Context())
        self.tasks.add(task)
        return task

    def _done(self, run_pk: int, slot: Slot | None, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        self.stops.pop(run_pk, None)
        if slot is not None:
            self.slots.discard(slot)
        if not task.cancelled() and task.exception() is not None:
            logger.error("stream task %s failed", task.get_name(), exc_info=task.exception())
        # A slot is free: there may be queued runs waiting for it.
        self.wakeup.set()

    async def stop(self) -> None:
        self.stopped = True
        current = wakeup.registered()
        if isinstance(current, _Listener) and current.supervisor is self:
            wakeup.register(None)
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


@dataclass(frozen=True)
class _Listener:
    """What ``wakeup`` calls: hands each call to the supervisor's loop, from whatever thread it comes."""

    supervisor: Supervisor

    def wake(self) -> None:
        self.supervisor.loop.call_soon_threadsafe(self.supervisor.wakeup.set)

    def stop_stream(self, run_pk: int) -> None:
        self.supervisor.loop.call_soon_threadsafe(self.supervisor.stop_stream, run_pk)

    def hold_slot(self) -> _Handoff | None:
        loop = self.supervisor.loop
        try:
            if asyncio.get_running_loop() is loop:
                return None  # the loop would wait for itself
        except RuntimeError:
            pass  # a thread without a loop: the usual caller
        answer = concurrent.futures.Future()

        def hold() -> None:
            if answer.set_running_or_notify_cancel():  # not given up on meanwhile
                try:
                    answer.set_result(self.supervisor.hold_now())
                except BaseException as problem:  # the asker must not wait for ever
                    answer.set_exception(problem)
                    raise

        if not self.call_soon(hold):
            return None
        try:
            try:
                slot = answer.result(timeout=HANDOFF_WAIT)
            except concurrent.futures.TimeoutError:
                if answer.cancel():
                    return None  # it will not hold one now
                slot = answer.result()  # it was holding one just then
        except Exception:  # a hand-off only saves time: the run goes the usual way
            logger.exception("holding a stream slot for a hand-off failed")
            return None
        return _Handoff(self.supervisor, slot) if slot is not None else None

    def call_soon(self, callback, *args) -> bool:
        loop = self.supervisor.loop
        if not loop.is_running():  # a loop that stopped would hold the callback for ever
            return False
        try:
            # A fresh context: the caller's (a request's) must not leak into the loop.
            loop.call_soon_threadsafe(callback, *args, context=contextvars.Context())
        except RuntimeError:  # closed meanwhile
            return False
        return True


@dataclass(frozen=True)
class _Handoff:
    """A slot ``hold_now`` held for a run a service claims for this process: streamed or given back, once."""

    supervisor: Supervisor
    slot: Slot

    @property
    def worker(self) -> str:
        return self.supervisor.worker

    def stream(self, run: Run | int) -> None:
        self._on_loop(functools.partial(self.supervisor.handed_over, run, self.slot))

    def give_back(self) -> None:
        self._on_loop(functools.partial(self.supervisor.give_back, self.slot))

    def _on_loop(self, call) -> None:
        try:
            self.supervisor.loop.call_soon_threadsafe(call, context=contextvars.Context())
        except RuntimeError:
            # The loop closed meanwhile (shutting down): a claimed run's lease lapses and recovery sends it.
            logger.warning("the supervisor's loop closed before a handed-over run reached it")
