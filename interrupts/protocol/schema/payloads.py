"""An answer's payload against its interrupt's schema: every error, in the server or, when costly, in a worker."""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..errors import ContractViolation
from .checks import check_usable_schema
from .limits import COSTLY_WAIT_SECONDS, FAST_VALIDATION_STEPS, MAX_VALIDATION_STEPS
from .patterns import UnsafePattern
from .problems import ONLY_CANCEL, shortened, with_id
from .validator import TooCostly, errors_within

# How many errors the summary of INVALID_PAYLOAD spells out; all are in details["errors"].
_SUMMARY_ERRORS = 3

_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def _costly_pool() -> ProcessPoolExecutor:
    """The worker process for costly checks, started on first use (spawned: no inherited threads)."""
    # One worker, one check at a time: a CPU-bound check on a server thread
    # would hold the interpreter lock against every other request.
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return _pool


def _discard_pool(pool: ProcessPoolExecutor) -> None:
    global _pool
    with _pool_lock:
        if _pool is pool:
            _pool = None
    pool.shutdown(wait=False, cancel_futures=True)


def payload_errors(
    schema: Any,
    payload: Any,
    *,
    interrupt_id: str | None = None,
    max_steps: int = MAX_VALIDATION_STEPS,
) -> list[dict[str, str]]:
    """Every way *payload* fails *schema*, as ``{"path", "message"}`` dicts sorted
    by path (then message); an empty list means the payload is valid.

    ``path`` is a JSON pointer to the offending value in the payload (``""`` for
    the payload itself; for a missing ``required`` property it is the object
    that lacks it, and the message names the property).

    Refuses, rather than validating, when the schema cannot be used:
    ``check_usable_schema``'s codes (``SCHEMA_TOO_LARGE``, ``INVALID_SCHEMA``,
    ``REMOTE_REF``, ``UNSAFE_PATTERN``); ``INVALID_SCHEMA`` too for a ``$ref``
    that cannot be resolved or that recurses forever; and
    ``SCHEMA_TOO_COSTLY`` when checking takes more than *max_steps* steps.
    Nothing is ever fetched. Safe to call from concurrent threads: each call
    has its own budget.
    """
    check_usable_schema(schema, interrupt_id=interrupt_id)
    try:
        try:
            found = errors_within(schema, payload, min(max_steps, FAST_VALIDATION_STEPS))
        except TooCostly:
            if max_steps <= FAST_VALIDATION_STEPS:
                raise
            found = _costly_errors(schema, payload, max_steps, interrupt_id)
    except ContractViolation:
        raise
    except TooCostly:
        subject = f"The answer to interrupt {interrupt_id}" if interrupt_id else "This answer"
        raise ContractViolation(
            "SCHEMA_TOO_COSTLY",
            f"{subject} needs more checking than Countersign allows (over {max_steps} validation steps): "
            "its responseSchema asks for too much work, for example references that repeat each other, "
            "or the answer is very large. Send a smaller answer if it can be; otherwise the agent must "
            "simplify the schema, and the interrupt can only be cancelled meanwhile.",
            **with_id(interrupt_id, max_steps=max_steps),
        ) from None
    except UnsafePattern as exc:
        # Only reachable through a pattern the static scan cannot see, such as
        # one under an unknown keyword that a "$ref": "#/..." points at.
        raise ContractViolation(
            "UNSAFE_PATTERN",
            f"The responseSchema has a pattern Countersign cannot run safely ({exc}): patterns run with "
            f"RE2, which has no backreferences, lookahead or lookbehind. {ONLY_CANCEL}",
            **with_id(interrupt_id),
        ) from None
    except Exception as exc:  # noqa: BLE001 - untrusted schema: report, never crash
        # Covers referencing.exceptions.Unresolvable (a $ref to nowhere, or to
        # a remote document, which is never fetched) and RecursionError (a
        # $ref cycle such as {"$ref": "#"}), which pass the metaschema check.
        raise ContractViolation(
            "INVALID_SCHEMA",
            f"The responseSchema cannot be used to validate an answer ({shortened(_described(exc), 200)}). "
            f"{ONLY_CANCEL}",
            **with_id(interrupt_id),
        ) from None
    return sorted(found, key=lambda e: (e["path"], e["message"]))


def _costly_errors(schema: Any, payload: Any, steps: int, interrupt_id: str | None) -> list[dict[str, str]]:
    """``errors_within`` run in the worker process; its refusals raised here as they would be in-process."""
    pool = _costly_pool()
    try:
        future = pool.submit(_checked_in_worker, schema, payload, steps)
        outcome = future.result(timeout=COSTLY_WAIT_SECONDS)
    except (FutureTimeout, BrokenProcessPool) as problem:
        if isinstance(problem, BrokenProcessPool):
            _discard_pool(pool)  # the worker died (killed, out of memory): the next check starts a new one
        else:
            future.cancel()  # still queued behind other costly checks: drop it
        raise ContractViolation(
            "BUSY",
            "Countersign is busy checking other answers that need a lot of checking; "
            "send this one again in a few seconds.",
            **with_id(interrupt_id, retry_after=int(COSTLY_WAIT_SECONDS)),
        ) from None
    kind, value = outcome
    if kind == "errors":
        return value
    if kind == "too_costly":
        raise TooCostly
    if kind == "unsafe_pattern":
        raise UnsafePattern(value)
    raise _WorkerFailure(value)


class _WorkerFailure(Exception):
    """Any other failure of a check in the worker (an unresolvable $ref, a cycle), as its text."""


def _described(problem: Exception) -> str:
    return str(problem) if isinstance(problem, _WorkerFailure) else f"{type(problem).__name__}: {problem}"


def _checked_in_worker(schema: Any, payload: Any, steps: int) -> tuple[str, Any]:
    """The worker's side of ``_costly_errors``: every outcome as plain, picklable data."""
    try:
        return "errors", errors_within(schema, payload, steps)
    except TooCostly:
        return "too_costly", None
    except UnsafePattern as problem:
        return "unsafe_pattern", str(problem)
    except Exception as problem:  # noqa: BLE001 - reported to the caller as INVALID_SCHEMA
        return "failed", f"{type(problem).__name__}: {problem}"


def _summary(errors: list[dict[str, str]]) -> str:
    """A sentence naming the first few payload errors and how many more there are."""
    parts = [f"at {e['path'] or 'the top level'}: {e['message']}" for e in errors[:_SUMMARY_ERRORS]]
    text = "; ".join(parts)
    rest = len(errors) - _SUMMARY_ERRORS
    if rest > 0:
        text += f" (and {rest} more problem{'s' if rest > 1 else ''})"
    return text


def validate_payload(schema: Any, payload: Any, interrupt_id: str | None = None) -> None:
    """Raise ``ContractViolation("INVALID_PAYLOAD", errors=[...])`` when *payload*
    does not match *schema* (rule 6), or ``INVALID_SCHEMA`` when the schema is broken.
    """
    errors = payload_errors(schema, payload, interrupt_id=interrupt_id)
    if errors:
        subject = f"The answer to interrupt {interrupt_id}" if interrupt_id else "The answer"
        raise ContractViolation(
            "INVALID_PAYLOAD",
            f"{subject} does not match its responseSchema: {_summary(errors)}. "
            "Correct the payload and submit it again.",
            **with_id(interrupt_id, errors=errors),
        )


