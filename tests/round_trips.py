"""Count what a piece of code asks of the database engine itself, beneath Django.

Django's query log sees only its own cursors; the relay writes events through
the driver's cursor (``hub.events._insert_events``), and transactions begin and
commit without a query of Django's. So this counts at the engine's edge:
SQLite's trace callback (every statement the library runs, ``BEGIN`` and
``COMMIT`` included), and on PostgreSQL libpq's own protocol trace, where each
round trip ends with the server's ``ReadyForQuery`` (a ``COPY`` waits for one
answer more, ``CopyInResponse``, before its rows go).
"""

from __future__ import annotations

import contextlib
import tempfile

from django.db import connection
from psycopg import pq


class Trips:
    """What was sent: ``statements`` (the SQL, on SQLite) and ``count``, the round trips."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.count = 0


@contextlib.contextmanager
def round_trips(using=connection):
    """Round trips to the database of ``using`` (this thread's connection) within the block."""
    using.ensure_connection()
    trips = Trips()
    raw = using.connection
    if using.vendor == "sqlite":
        raw.set_trace_callback(trips.statements.append)
        try:
            yield trips
        finally:
            raw.set_trace_callback(None)
            trips.count = len(trips.statements)
        return
    with tempfile.TemporaryFile("w+") as trace:
        raw.pgconn.trace(trace.fileno())
        raw.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield trips
        finally:
            raw.pgconn.untrace()
            trace.seek(0)
            lines = trace.read().splitlines()
            trips.statements = [line.split("\t", 3)[-1] for line in lines if "\tQuery\t" in line
                                or "\tParse\t" in line]
            trips.count = sum(1 for line in lines if line.startswith("B\t")
                              and line.split("\t")[2].strip() in ("ReadyForQuery", "CopyInResponse"))
