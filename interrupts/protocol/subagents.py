"""Which subagent raised an interrupt (AG-UI 1.0 subagents, C35/C36): pure, shared by every reader.

The inbox, the audit page and the thread page (``reads``) and the audit
trail (``hub.trail``) attribute interrupts with these functions, so what a
reviewer was shown and what the trail holds cannot drift apart.
"""

from __future__ import annotations

#: Events that say which subagent raised what: its name (STARTED), its interrupts (FINISHED, suspended).
SUBAGENT_EVENTS = ("SUBAGENT_STARTED", "SUBAGENT_FINISHED")


def raw_subagent_run_id(raw: object) -> str | None:
    """``subagentRunId`` of an interrupt as sent: a non-empty string, or None."""
    value = raw.get("subagentRunId") if isinstance(raw, dict) else None
    return value if isinstance(value, str) and value else None


def read_subagent_event(run_key, kind: str, payload: object, names: dict, suspended: dict) -> None:
    """Fold one SUBAGENT_STARTED or SUBAGENT_FINISHED of run ``run_key`` into ``names`` and ``suspended``.

    ``names``: (run, subagent run id) -> its announced name; ``suspended``:
    (run, interrupt id) -> the subagent run whose suspended outcome lists it.
    """
    sub = payload.get("subagentRunId") if isinstance(payload, dict) else None
    if not isinstance(sub, str) or not sub:
        return
    if kind == "SUBAGENT_STARTED" and isinstance(payload.get("name"), str) and payload["name"].strip():
        names[(run_key, sub)] = payload["name"]
    outcome = payload.get("outcome") if kind == "SUBAGENT_FINISHED" else None
    if isinstance(outcome, dict) and outcome.get("type") == "suspended":
        for interrupt_id in outcome.get("interruptIds") or []:
            if isinstance(interrupt_id, str):
                suspended.setdefault((run_key, interrupt_id), sub)


def attribute(run_key, interrupt_id: str, raw: object, names: dict, suspended: dict) -> tuple[str, str | None] | None:
    """(subagent run id, its name or None) that raised one interrupt, or None for the agent itself.

    By the interrupt's own ``subagentRunId`` (C35), else by a suspended
    outcome listing it (C36); named by its ``SUBAGENT_STARTED``.
    """
    sub = raw_subagent_run_id(raw) or suspended.get((run_key, interrupt_id))
    return None if sub is None else (sub, names.get((run_key, sub)))
