"""SQLite's planner statistics on the inbox's tables: written by each process's supervisor at its first round,
then every PLANNER_STATISTICS_EVERY seconds; PostgreSQL's autovacuum keeps its own, so nothing runs there."""

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from interrupts.hub import statistics, supervisor
from interrupts.models import Decision, Interrupt, Run

from .. import factories as make

pytestmark = pytest.mark.django_db(transaction=True)


def analyzed() -> set[str]:
    """The tables SQLite holds planner statistics for."""
    with connection.cursor() as cursor:
        if not cursor.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone():
            return set()
        return {table for (table,) in cursor.execute("SELECT DISTINCT tbl FROM sqlite_stat1").fetchall()}


def forget() -> None:
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM sqlite_stat1")


def rows() -> None:
    # Interrupted runs, as runs with interrupts are: a queued one would be claimed by the tick and streamed
    # to no agent, and that stream's writes raced the test's teardown (a deadlock with its TRUNCATE).
    for _ in range(3):
        interrupt = make.interrupt(make.run(status=Run.Status.INTERRUPTED))
        make.decision(interrupt, make.user())


def test_on_postgresql_nothing_runs_on_sqlite_the_inbox_s_tables_are_analyzed():
    rows()
    with CaptureQueriesContext(connection) as statements:
        statistics.refresh()
    if connection.vendor != "sqlite":
        assert len(statements) == 0
        return
    assert {model._meta.db_table for model in (Interrupt, Decision, Run)} <= analyzed()


async def test_a_supervisor_analyzes_at_its_first_round_and_then_only_when_the_interval_passed(boss, monkeypatch):
    sqlite = connection.vendor == "sqlite"
    await sync_to_async(rows)()
    await boss.tick()
    first = boss.analyzed_at
    assert first is not None
    if sqlite:
        assert Interrupt._meta.db_table in await sync_to_async(analyzed)()
        await sync_to_async(forget)()
    await boss.tick()
    assert boss.analyzed_at == first  # not due yet
    if sqlite:
        assert await sync_to_async(analyzed)() == set()
    monkeypatch.setattr(supervisor, "PLANNER_STATISTICS_EVERY", 0)
    await boss.tick()
    assert boss.analyzed_at > first
    if sqlite:
        assert Interrupt._meta.db_table in await sync_to_async(analyzed)()
