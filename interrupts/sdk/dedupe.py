"""The runs an agent has handled: a runId it has seen is answered again, never acted on again.

Countersign re-sends a resume, same runId and bytes, when it lost the agent's
answer and the agent declares ``custom.dedupesRunId`` (``Agent.capabilities()``).
Keyed by (threadId, runId, the body's hash, whether its signature checked):

- a handled run's request gets its frames again, byte for byte, and the agent's code does not run;
- a request for a run in progress waits for its end, then gets them;
- a run outlives its caller, so the next request gets its real ending.

Bounded: the ``Agent.remember_runs`` newest runs, ``MAX_REPLAY_BYTES`` of frames
each; past that a run keeps RUN_STARTED, its last snapshots and its terminal
event, all Countersign records an ending from. The memory is the process's:
a restarted agent runs the repeat (dedupe in your database if that matters).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable

from ag_ui.core import BaseEvent

from ..protocol.sse import encode_event

#: Bytes of frames kept per run for its replay; past them, only what its ending needs.
MAX_REPLAY_BYTES = 1024 * 1024

#: What a run cut to its ending keeps besides RUN_STARTED: the latest of each kind.
_KEPT = ("STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED", "RUN_ERROR")


class _Record:
    """One run's frames as produced, and whether it has ended."""

    __slots__ = ("frames", "size", "cut", "kept", "ended", "listeners", "start")

    def __init__(self) -> None:
        self.frames: list[tuple[str, bytes]] = []
        self.size = 0
        self.cut = False  # past MAX_REPLAY_BYTES: ``kept`` only, after RUN_STARTED
        self.kept: dict[str, bytes] = {}
        self.ended = asyncio.Event()
        self.listeners: list[asyncio.Queue] = []
        self.start: Callable[[], None] = lambda: None  # runs it, once

    def add(self, kind: str, frame: bytes) -> None:
        if not self.cut and self.size + len(frame) <= MAX_REPLAY_BYTES:
            self.frames.append((kind, frame))
            self.size += len(frame)
            return
        if not self.cut:
            self.cut = True
            for earlier_kind, earlier in self.frames[1:]:
                if earlier_kind in _KEPT:
                    self.kept[earlier_kind] = earlier
            del self.frames[1:]
        if kind in _KEPT:
            self.kept.pop(kind, None)  # re-inserted last: the order they came in
            self.kept[kind] = frame

    def replay(self) -> list[bytes]:
        return [frame for _kind, frame in self.frames] + list(self.kept.values())


class HandledRuns:
    """The runs one agent handled, newest last, at most ``limit`` of them (runs in progress are never dropped)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.runs: OrderedDict[tuple, _Record] = OrderedDict()
        # Strong references to the runs in progress: the loop keeps only weak ones.
        self.tasks: set[asyncio.Task] = set()

    def answer(self, key: tuple, produce: Callable[[], AsyncIterator[BaseEvent]]) -> AsyncIterator[bytes]:
        """The frames of the run ``key``: ``produce()``'s, run once in the background, or the recorded ones."""
        record = self.runs.get(key)
        if record is not None:
            self.runs.move_to_end(key)
            return _replay(record)
        record = self.runs[key] = _Record()
        self._forget_oldest()
        listener: asyncio.Queue = asyncio.Queue()
        record.listeners.append(listener)

        def start() -> None:
            record.start = lambda: None
            task = asyncio.ensure_future(_produce(record, produce()))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

        record.start = start
        return _follow(record, listener)

    def _forget_oldest(self) -> None:
        while len(self.runs) > self.limit:
            oldest = next((key for key, record in self.runs.items() if record.ended.is_set()), None)
            if oldest is None:
                return  # all in progress: bounded by how many run at once
            del self.runs[oldest]


async def _produce(record: _Record, events: AsyncIterator[BaseEvent]) -> None:
    try:
        async for event in events:
            kind = getattr(event.type, "value", event.type)
            frame = encode_event(event).encode()
            record.add(kind, frame)
            for listener in record.listeners:
                listener.put_nowait(frame)
    finally:
        record.ended.set()
        for listener in record.listeners:
            listener.put_nowait(None)
        record.listeners.clear()


async def _follow(record: _Record, listener: asyncio.Queue) -> AsyncIterator[bytes]:
    # Started by its first reader, on the loop that reads it: a server that reads
    # the stream on another loop than the view's (Django under WSGI) keeps the run.
    record.start()
    try:
        while (frame := await listener.get()) is not None:
            yield frame
    finally:
        # The caller went away: the run goes on without it.
        if listener in record.listeners:
            record.listeners.remove(listener)


async def _replay(record: _Record) -> AsyncIterator[bytes]:
    record.start()  # its first caller went away before reading a byte: the repeat runs it
    await record.ended.wait()
    for frame in record.replay():
        yield frame


def handled_runs(agent) -> HandledRuns:
    """The agent's memory of handled runs, made at its first request."""
    memory = agent.__dict__.get("_handled_runs")
    if memory is None:
        memory = agent.__dict__["_handled_runs"] = HandledRuns(agent.remember_runs)
    return memory
