"""Refusals of the hub itself, and the one renderer of every refusal Countersign answers over HTTP.

Every HTTP surface (the REST API, the AG-UI gateway, the middleware, the
pages' JSON) refuses with the same body, built by
``protocol.errors.refusal_body``::

    {"code": "TOO_LARGE", "detail": "A comment holds at most 10,000 characters."}
    {"code": "INVALID_REQUEST", "detail": "The request has invalid fields.", "fields": {"action": ["..."]}}

``code`` is stable, for programs; ``detail`` is a sentence a person can act
on; ``fields`` appears only when named fields are invalid; any structured
details (an interrupt id, a schema error's path) follow. A refusal worth
retrying carries ``Retry-After``. Toward AG-UI clients and agents a refusal
is instead a RUN_ERROR event with ``code`` and ``message``: that is AG-UI's
wire, and it stays so.

:func:`render` turns a refusal into body, status and headers, without any
framework; :func:`json_response` is the adapter for Django views (the API
wraps the same rendering in a DRF ``Response``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..protocol.errors import ContractViolation, ProtocolError, refusal_body


class Refusal(ProtocolError):
    """A request Countersign will not carry out: a code, a sentence, and an HTTP status."""

    def __init__(self, code: str, message: str, status: int = 409, **details) -> None:
        super().__init__(code, message, **details)
        self.status = status


# The contract's refusals, as HTTP statuses: a conflict with the thread's state
# is 409; an answer of the wrong shape is 400.
CONTRACT_STATUS = {
    "PENDING_INTERRUPTS": 409,
    "ALREADY_RESOLVED": 409,
    "NOTHING_TO_RESUME": 409,
    "INCOMPLETE_RESUME": 409,
    "EXPIRED": 409,
    "INVALID_EXPIRY": 409,
    "THREAD_MISMATCH": 409,
    # The thread's last run left tool calls its client must answer first (AG-UI 1.0 C23).
    "UNANSWERED_TOOL_CALLS": 409,
    # Too many costly answers are being checked at once: try again shortly.
    "BUSY": 503,
}


def http_status(problem: ProtocolError) -> int:
    """The HTTP status an API answers a refusal with."""
    if isinstance(problem, Refusal):
        return problem.status
    if isinstance(problem, ContractViolation):
        return CONTRACT_STATUS.get(problem.code, 400)
    return 400


# --- A busy database: "not now", never "no" -------------------------------------------

# Seconds a caller is asked to wait after a busy database: locks are held for
# milliseconds normally, so a request refused after the lock timeout has met
# something unusual (a migration, a long report) and should not hammer it.
BUSY_RETRY_AFTER = 5
# What every door says then (the API, pages, the gateway's RUN_ERROR).
BUSY_MESSAGE = (f"The database is busy with other work and this request waited too long for it; nothing was "
                f"changed. Try again in {BUSY_RETRY_AFTER} seconds.")


def database_busy(exc: BaseException) -> bool:
    """True when ``exc`` means another transaction held a lock too long, not that the request is wrong.

    SQLite: "database is locked" after its busy timeout; PostgreSQL: lock_timeout
    (SQLSTATE 55P03, lock_not_available); psycopg's pool: no free connection in time.
    """
    from django.db import OperationalError

    try:
        from psycopg_pool import PoolTimeout
    except ImportError:  # SQLite-only installs
        PoolTimeout = ()  # noqa: N806
    for problem in (exc, exc.__cause__):
        if problem is None:
            continue
        if PoolTimeout and isinstance(problem, PoolTimeout):
            return True
        if getattr(problem, "sqlstate", None) == "55P03":
            return True
        if isinstance(problem, OperationalError) and "database is locked" in str(problem):
            return True
    return False


def busy() -> Refusal:
    """The refusal for a request that met a busy database: nothing was changed, the same request will do."""
    return Refusal("BUSY", BUSY_MESSAGE, status=503)


# --- Rendering ----------------------------------------------------------------------


@dataclass(frozen=True)
class Rendered:
    """A refusal as an HTTP answer: the JSON body, the status, and headers such as Retry-After."""

    body: dict[str, Any]
    status: int
    headers: dict[str, str] = field(default_factory=dict)


def render(problem: ProtocolError, *, status: int | None = None, retry_after: float | None = None,
           headers: dict[str, str] | None = None) -> Rendered:
    """``problem`` as an HTTP answer; ``status`` defaults to :func:`http_status`.

    A BUSY refusal says when to try again (its own ``retry_after`` detail, or
    :data:`BUSY_RETRY_AFTER`); any other refusal does when given ``retry_after``.
    """
    extra = dict(headers or {})
    if retry_after is None and problem.code == "BUSY":
        retry_after = problem.details.get("retry_after", BUSY_RETRY_AFTER)
    if retry_after is not None:
        extra["Retry-After"] = str(int(retry_after))
    return Rendered(problem.body(), http_status(problem) if status is None else status, extra)


def refused(status: int, code: str, detail: str, *, retry_after: float | None = None,
            headers: dict[str, str] | None = None, **details: Any) -> Rendered:
    """A refusal made on the spot, rendered: the surfaces' own 4xx (405, 401, 415, 404, ...)."""
    return render(Refusal(code, detail, status=status, **details), retry_after=retry_after, headers=headers)


def json_response(rendered: Rendered):
    """A Django ``JsonResponse`` carrying ``rendered``."""
    from django.http import JsonResponse

    response = JsonResponse(rendered.body, status=rendered.status)
    for name, value in rendered.headers.items():
        response[name] = value
    return response
