"""SQLite's query planner statistics (ANALYZE) on the inbox's tables, refreshed by each process's supervisor.

Without them SQLite takes ``status = 'pending'`` for a selective index and walks every pending
interrupt where a handful of the reviewer's own decisions would do: at 100,000 pending, the
inbox's count of what waits for them took 26 ms, 9 ms with statistics (bench/inbox_scale.py).
PostgreSQL's autovacuum keeps its own.
"""

from django.db import connection

from ..models import Decision, Interrupt, Run

# The tables whose plans turn on how their rows are spread: what the inbox counts and filters.
TABLES = (Interrupt, Decision, Run)


def refresh() -> None:
    """ANALYZE the inbox's tables on SQLite (tens of milliseconds at 100,000 pending); nothing elsewhere."""
    if connection.vendor != "sqlite":
        return
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for model in TABLES:
            cursor.execute(f"ANALYZE {quote(model._meta.db_table)}")
