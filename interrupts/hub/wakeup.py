"""Wake this process's supervisor: a leaf the services call and the supervisor registers with.

A request never owns background work: it commits a row and calls ``wake()``
after commit (``transaction.on_commit(wakeup.wake)``). The supervisor, which
imports the services, registers itself here when it starts; the services
import only this module, so nothing below the supervisor imports it.
Without a supervisor in this process (a management command, a test) both
calls do nothing, and another process finds the row on its next poll.

The supervisor runs on the serving event loop, so it is also how a leaf that
runs in a database thread hands work to that loop (``call_soon``) without
importing anything above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Listener(Protocol):
    def wake(self) -> None: ...

    def stop_stream(self, run_pk: int) -> None: ...

    def call_soon(self, callback: Callable[..., object], *args) -> bool: ...

    def hold_slot(self) -> Handoff | None: ...


class Handoff(Protocol):
    """A stream slot of this process's supervisor, held for one run a service is about to claim for it."""

    worker: str

    def stream(self, run) -> None:
        """Stream ``run``, claimed for ``worker`` (read since, with its thread and agent, or its pk); the slot
        goes with it."""

    def give_back(self) -> None:
        """Nothing was claimed: the slot is free again (looked at at once if the last round was short of room)."""


_listener: Listener | None = None


def register(listener: Listener | None) -> None:
    """Make ``listener`` the one this process wakes (None: no supervisor runs here any more)."""
    global _listener
    _listener = listener


def registered() -> Listener | None:
    """The supervisor this process wakes, if one runs here."""
    return _listener


def wake() -> None:
    """Ask this process's supervisor to look for work now (safe from any thread)."""
    if _listener is not None:
        _listener.wake()


def stop_stream(run_pk: int) -> None:
    """Tell this process's supervisor that ``run_pk`` was ended elsewhere: stop streaming it now (any thread).

    A run streamed by another process stops there at its next batch or heartbeat.
    """
    if _listener is not None:
        _listener.stop_stream(run_pk)


def call_soon(callback: Callable[..., object], *args) -> bool:
    """Run ``callback(*args)`` on the serving event loop soon, from any thread; False if it will not run.

    False when no supervisor runs here, its loop no longer runs, or the
    listener only wakes (one that predates ``call_soon``): the caller then
    does the work itself.
    """
    call = getattr(_listener, "call_soon", None)
    return call is not None and call(callback, *args)


def hold_slot() -> Handoff | None:
    """Hold a stream slot of this process's supervisor, to claim a run for it and hand it over (any thread but
    the serving loop's); None when no supervisor runs here, it has no slot free, or its loop did not answer at once.

    The caller claims the run in its own transaction, then calls ``stream`` or ``give_back``, once: a slot
    neither streamed nor given back stays taken.
    """
    hold = getattr(_listener, "hold_slot", None)
    return hold() if hold is not None else None
