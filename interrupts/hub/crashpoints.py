"""Test-only fault injection: this process kills itself (SIGKILL) at a named point of a resume's delivery.

``COUNTERSIGN_CRASH_AT`` names the point, read once: the crash tests
(tests/e2e/test_crash.py) kill a real server exactly where the outbox's
contract must hold, rather than hoping a timed ``kill -9`` lands there.

- ``claimed``: the resume is claimed (marked streaming), nothing recorded as sent;
- ``sent``: the send mark is committed, the request has not left;
- ``answered``: the agent answered the request's status line, no event recorded;
- ``events:<n>``: at least n of the agent's events are recorded, the terminal one not;
- ``recorded``: the terminal event is recorded, the run not yet ended as it said.

Only a resume's first try crashes (a run with a ``resume_key`` that no
process has died holding yet, ``Run.losses``): the run that raised the
interrupts gets through, and so does the resume sent again after recovery.
Unset, ``reached`` is one comparison.
"""

from __future__ import annotations

import os
import signal

from ..conf import settings

POINTS = ("claimed", "sent", "answered", "events", "recorded")

_armed: tuple[str, int] | None | bool = False  # False: not read yet


def _read() -> tuple[str, int] | None:
    value = (settings.COUNTERSIGN_CRASH_AT or "").strip()
    if not value:
        return None
    point, _, count = value.partition(":")
    if point not in POINTS:
        raise ValueError(f"COUNTERSIGN_CRASH_AT={value!r}: name one of {', '.join(POINTS)}.")
    return point, int(count or 0)


def reached(point: str, run, count: int = 0) -> None:
    """Kill this process now if ``COUNTERSIGN_CRASH_AT`` names ``point`` (for ``events``: ``count`` reached it)."""
    global _armed
    if _armed is None:
        return
    if _armed is False:
        _armed = _read()
        if _armed is None:
            return
    armed, at_least = _armed
    if armed == point and count >= at_least and run.resume_key is not None and not run.losses:
        os.kill(os.getpid(), signal.SIGKILL)
