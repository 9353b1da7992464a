"""The per-process owner of background work: streams, queued resumes, expiry.

``manage.py serve`` starts one ``Supervisor`` on daphne's event loop. It
claims queued runs that are due (row locks: with several processes each run
goes to exactly one) and streams them, closes interrupts whose expiry passed, and
fails runs whose streaming process died (their claim lapsed). Requests never
do this work: they commit a row and call ``wake()``; other processes find the
row on their next poll.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import socket
import uuid

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

logger = logging.getLogger(__name__)

# Identifies this process in run claims; unique even across restarts.
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

_current: Supervisor | None = None


def wake() -> None:
    """Ask this process's supervisor to look for work now (safe from any thread)."""
    supervisor = _current
    if supervisor is not None:
        supervisor.loop.call_soon_threadsafe(supervisor.wakeup.set)


def ensure() -> Supervisor:
    """This process's supervisor, started on the running loop if none runs yet.

    ``manage.py serve`` starts one at boot; a server without that hook (for
    instance ``runserver``) gets one at the first request that needs it.
    """
    return _current if _current is not None else Supervisor().start_and_return()


class Supervisor:
    def __init__(self, worker: str = WORKER_ID) -> None:
        self.worker = worker
        self.loop = asyncio.get_running_loop()
        self.wakeup = asyncio.Event()
        # Strong references: the event loop keeps only weak ones to tasks.
        self.tasks: set[asyncio.Task] = set()

    def start_and_return(self) -> Supervisor:
        self.start()
        return self

    def start(self) -> asyncio.Task:
        """Start the supervisor's loop on the running event loop and make it this process's."""
        global _current
        _current = self
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
        """One round: expire due interrupts, fail lost runs, claim and stream queued runs."""
        from . import decisions, runs, streaming

        await sync_to_async(close_old_connections)()
        await sync_to_async(decisions.expire_due)()
        for run in await sync_to_async(runs.lapsed)(timezone.now()):
            if await sync_to_async(runs.take_over)(run, self.worker):
                await sync_to_async(streaming.recover)(run)
        room = settings.COUNTERSIGN_MAX_STREAMS - self.streaming()
        if room <= 0:
            return
        for run_pk in await sync_to_async(runs.claim_due)(room, self.worker):
            self.stream(run_pk)

    def streaming(self) -> int:
        return sum(1 for t in self.tasks if t.get_name().startswith("stream-") and not t.done())

    def stream(self, run_pk: int, listener: asyncio.Queue | None = None) -> asyncio.Task:
        """Stream a run this process has claimed, in the background (it survives the caller)."""
        from .streaming import stream_run

        task = self._spawn(stream_run(run_pk, self.worker, listener), f"stream-{run_pk}")
        task.add_done_callback(self._done)
        return task

    def _spawn(self, coroutine, name: str) -> asyncio.Task:
        # A fresh context: a task started from a request must not inherit the
        # request's asgiref executor, which quits when the response is done.
        task = self.loop.create_task(coroutine, name=name, context=contextvars.Context())
        self.tasks.add(task)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("stream task %s failed", task.get_name(), exc_info=task.exception())
        # A slot is free: there may be queued runs waiting for it.
        self.wakeup.set()

    async def stop(self) -> None:
        global _current
        if _current is self:
            _current = None
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
