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

from ..protocol.errors import ContractViolation, ProtocolError


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


# --- A database that cannot serve now: "not now", never "no" ------------------------

# Seconds a caller is asked to wait after a busy database: locks are held for
# milliseconds normally, so a request refused after the lock timeout has met
# something unusual (a migration, a long report) and should not hammer it.
BUSY_RETRY_AFTER = 5
# What every door says then (the API, pages, the gateway's RUN_ERROR).
BUSY_MESSAGE = (f"The database is busy with other work and this request waited too long for it; nothing was "
                f"changed. Try again in {BUSY_RETRY_AFTER} seconds.")
# No pooled connection in time: many requests at once, or a server that is down (PostgreSQL).
POOL_TIMEOUT_MESSAGE = (f"No database connection came free in time (the database is busy, or restarting); nothing "
                        f"was changed. Try again in {BUSY_RETRY_AFTER} seconds.")
# A restart takes seconds; a caller asked sooner would only meet it again.
UNAVAILABLE_RETRY_AFTER = 5
UNAVAILABLE_MESSAGE = (f"The database cannot be reached just now (it is restarting, or refusing connections). "
                       f"Try again in {UNAVAILABLE_RETRY_AFTER} seconds; if you were changing something, reload "
                       f"first to see whether it was saved.")
# A full disk needs an operator to make room: asking again in seconds would not help.
FULL_RETRY_AFTER = 60
FULL_MESSAGE = ("The database's disk is full, so nothing can be saved and nothing was changed. Ask a Countersign "
                f"administrator to free space, then try again (in {FULL_RETRY_AFTER} seconds or later).")

# PostgreSQL's SQLSTATEs for a server that is going or gone: class 08 (connection
# exceptions), admin shutdown, crash shutdown, "cannot connect now" (starting or
# stopping), too many connections.
_UNAVAILABLE_SQLSTATES = {"57P01", "57P02", "57P03", "53300"}
# SQLite's words (it has no codes in the message): each means the file cannot be used now.
_SQLITE_UNAVAILABLE = ("disk i/o error", "unable to open database file")
_SQLITE_BUSY = ("database is locked", "database table is locked")


def database_fault(exc: BaseException) -> Refusal | None:
    """The refusal for ``exc`` when it means the database cannot serve now, not that the request is wrong; else None.

    BUSY: a lock held too long (SQLite's busy timeout, PostgreSQL's lock_timeout
    55P03) or no pooled connection free in time. DATABASE_FULL: SQLite's
    "database or disk is full", PostgreSQL's disk_full (53100).
    DATABASE_UNAVAILABLE: a connection refused, closed or terminated (psycopg's
    errors without a SQLSTATE, class 08, 57P01-57P03, 53300; Django's
    "connection already closed"), SQLite's I/O and open failures. Each is
    answered 503 with Retry-After; only DATABASE_UNAVAILABLE means "a fresh
    connection may do" (:func:`retry_on_fresh_connection`).
    """
    import sqlite3

    from django.db import InterfaceError, OperationalError

    try:
        from psycopg_pool import PoolTimeout
    except ImportError:  # SQLite-only installs
        PoolTimeout = ()  # noqa: N806
    try:
        import psycopg
        psycopg_errors = (psycopg.OperationalError, psycopg.InterfaceError)
    except ImportError:
        psycopg_errors = ()
    for problem in (exc, exc.__cause__):
        if problem is None:
            continue
        if PoolTimeout and isinstance(problem, PoolTimeout):
            return Refusal("BUSY", POOL_TIMEOUT_MESSAGE, status=503)
        sqlstate = getattr(problem, "sqlstate", None)
        if sqlstate == "55P03":
            return busy()
        if sqlstate == "53100":
            return Refusal("DATABASE_FULL", FULL_MESSAGE, status=503)
        if sqlstate in _UNAVAILABLE_SQLSTATES or (sqlstate or "").startswith("08"):
            return unavailable()
        if psycopg_errors and isinstance(problem, psycopg_errors) and sqlstate is None:
            # No SQLSTATE: the server never answered (refused, closed, terminated mid-query).
            return unavailable()
        if isinstance(problem, (OperationalError, InterfaceError, sqlite3.OperationalError)):
            words = str(problem).lower()
            if any(said in words for said in _SQLITE_BUSY):
                return busy()
            if "database or disk is full" in words:
                return Refusal("DATABASE_FULL", FULL_MESSAGE, status=503)
            if any(said in words for said in _SQLITE_UNAVAILABLE) or "connection already closed" in words:
                return unavailable()
    return None


def database_busy(exc: BaseException) -> bool:
    """True when ``exc`` means the database cannot serve now (busy, full, unreachable): see :func:`database_fault`."""
    return database_fault(exc) is not None


def retry_on_fresh_connection(fault: Refusal | None) -> bool:
    """True when ``fault`` was a lost connection, which a new one may not meet: worth one retry of a safe request."""
    return fault is not None and fault.code == "DATABASE_UNAVAILABLE"


def busy() -> Refusal:
    """The refusal for a request that met a busy database: nothing was changed, the same request will do."""
    return Refusal("BUSY", BUSY_MESSAGE, status=503)


def unavailable() -> Refusal:
    """The refusal for a request that met a database it could not reach."""
    return Refusal("DATABASE_UNAVAILABLE", UNAVAILABLE_MESSAGE, status=503)


# Retry-After by code: each fault says how long is worth waiting.
RETRY_AFTER = {"BUSY": BUSY_RETRY_AFTER, "DATABASE_UNAVAILABLE": UNAVAILABLE_RETRY_AFTER,
               "DATABASE_FULL": FULL_RETRY_AFTER}


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

    A database fault (BUSY, DATABASE_UNAVAILABLE, DATABASE_FULL) says when to try
    again (its own ``retry_after`` detail, or :data:`RETRY_AFTER`); any other
    refusal does when given ``retry_after``.
    """
    extra = dict(headers or {})
    if retry_after is None and problem.code in RETRY_AFTER:
        retry_after = problem.details.get("retry_after", RETRY_AFTER[problem.code])
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
