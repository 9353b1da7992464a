"""Wake this process's supervisor: a leaf the services call and the supervisor registers with.

A request never owns background work: it commits a row and calls ``wake()``
after commit (``transaction.on_commit(wakeup.wake)``). The supervisor, which
imports the services, registers itself here when it starts; the services
import only this module, so nothing below the supervisor imports it.
Without a supervisor in this process (a management command, a test) both
calls do nothing, and another process finds the row on its next poll.
"""

from __future__ import annotations

from typing import Protocol


class Listener(Protocol):
    def wake(self) -> None: ...

    def stop_stream(self, run_pk: int) -> None: ...


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
