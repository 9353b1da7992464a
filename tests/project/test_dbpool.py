"""The PostgreSQL pool's check (project/dbpool.py): a dead connection refused, a live one passed without a query,
and one dead connection found replaces every idle one.

PostgreSQL only: runs in CI's PostgreSQL pass, with its own connections (not the pool's) to the test database.
"""

import select

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from project.dbpool import check_connection

POSTGRES = settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
pytestmark = [pytest.mark.skipif(not POSTGRES, reason="PostgreSQL's pool: runs in CI's PostgreSQL pass"),
              pytest.mark.django_db(transaction=True)]


def fresh() -> psycopg.Connection:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


def last_query(pid: int) -> str:
    with fresh() as other:
        return other.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]


def until_readable(conn: psycopg.Connection) -> None:
    """Wait (up to 10 s) for what the server sent to reach this connection's socket."""
    poll = select.poll()
    poll.register(conn.fileno(), select.POLLIN)
    assert poll.poll(10_000), "the server's message never arrived"


def test_a_live_idle_connection_passes_without_a_query_to_the_server():
    with fresh() as conn:
        conn.execute("SELECT 'the last thing asked'")
        check_connection(conn)
        check_connection(conn)
        assert last_query(conn.info.backend_pid) == "SELECT 'the last thing asked'"


def test_a_connection_the_server_ended_is_refused():
    with fresh() as conn:
        with fresh() as other:
            other.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        until_readable(conn)
        with pytest.raises(psycopg.OperationalError):
            check_connection(conn)


def test_a_closed_connection_is_refused_without_touching_its_socket():
    conn = fresh()
    conn.close()
    with pytest.raises(ConnectionError):
        check_connection(conn)


def test_a_connection_with_something_to_read_is_asked_and_passes():
    # A notification waiting on an idle connection is not a dead one: the server is asked, as the pool's own check does.
    with fresh() as conn:
        conn.execute("LISTEN countersign_pool_check")
        with fresh() as other:
            other.execute("NOTIFY countersign_pool_check")
        until_readable(conn)
        check_connection(conn)
        assert last_query(conn.info.backend_pid) == ""


def test_one_dead_connection_found_replaces_every_idle_one_in_the_pool():
    # As after a restart: the pool's idle connections all ended. Met one by one, each cost the
    # next request the pool's backoff (1 s, 2 s, 4 s...) until its timeout: one is met, then none.
    pool = connection.pool
    # Every idle connection, and four at least: what the pool hands out next is one of these.
    held = [pool.getconn() for _ in range(max(pool.get_stats()["pool_available"], 4))]
    killed = {conn.info.backend_pid for conn in held}
    for conn in held:
        pool.putconn(conn)
    lost = pool.get_stats().get("connections_lost", 0)
    with fresh() as other:
        other.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (list(killed),))
    for conn in held:
        until_readable(conn)
    served = [pool.getconn() for _ in range(4)]
    try:
        assert {conn.info.backend_pid for conn in served}.isdisjoint(killed)
        assert [conn.execute("SELECT 1").fetchone() for conn in served] == [(1,)] * 4
        assert pool.get_stats().get("connections_lost", 0) - lost == 1
    finally:
        for conn in served:
            pool.putconn(conn)
