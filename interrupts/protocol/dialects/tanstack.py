"""TanStack AI's generic interrupts: the continuation its ``chat()`` needs on every resume entry.

(Filled in by the TanStack adapter work.)
"""

from __future__ import annotations


def entry_metadata(raw_interrupt: dict, status: str, payload: object) -> dict:
    """``{"tanstack:interruptContinuation": ...}`` for an interrupt TanStack bound, else {}."""
    return {}
