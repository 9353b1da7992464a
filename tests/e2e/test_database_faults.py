"""A database that restarts, drops its connections or fills up is answered 503, never 500, and recovers unaided.

Real faults on real servers: a served app (`manage.py serve`) on a PostgreSQL of
the test's own, whose connections are terminated and which is stopped and
started again; and a served app on SQLite whose file may not grow, filled
from outside. Both back ends are the test's own, so each test runs once, in the CI pass of
its back end (``in_pass``), whatever that pass's DATABASE_URL says.
"""

from __future__ import annotations

import collections
import json
import sqlite3
from contextlib import closing

import httpx
import pytest

from ..servers import ServedApp, _setup
from .conftest import in_pass, logged_in, new_input, pending, start, wait_for
from .private_servers import PrivatePostgres

FAULT_CODES = {"BUSY", "DATABASE_UNAVAILABLE", "DATABASE_FULL"}


class Tally:
    """Every answer a test got, by status: a 503 must be the refusal a client can act on, a 500 never."""

    def __init__(self) -> None:
        self.statuses: collections.Counter = collections.Counter()

    def __call__(self, response: httpx.Response, *, machine: bool = True, codes=FAULT_CODES) -> httpx.Response:
        self.statuses[response.status_code] += 1
        assert response.status_code != 500, response.text[:2000]
        if response.status_code == 503:
            assert int(response.headers["Retry-After"]) >= 1
            assert "Content-Security-Policy" in response.headers
            if machine:
                assert response.headers["content-type"] == "application/json", response.text[:500]
                body = response.json()
                assert set(body) == {"code", "detail"} and body["code"] in codes and body["detail"], body
            else:
                assert response.headers["content-type"].startswith("text/html"), response.text[:500]
                assert "try again" in response.text.lower() and "Reload" in response.text
        return response

    def __str__(self) -> str:
        return ", ".join(f"{count} x {status}" for status, count in sorted(self.statuses.items()))


def sse_events(response: httpx.Response) -> list[dict]:
    return [json.loads(line.removeprefix("data: ")) for line in response.text.splitlines() if line.startswith("data: ")]


# --- PostgreSQL: connections terminated, the server restarted ------------------------------------


@pytest.fixture(scope="module")
def postgres():
    server = PrivatePostgres()
    try:
        yield server.create()
    finally:
        server.remove()


@pytest.fixture(scope="module")
def pg_app(tmp_path_factory, postgres):
    # A short wait for a pooled connection, so a request met while the server is down answers in 5 s,
    # not 20 (a fresh connection on a loaded CI machine can take a second or two).
    app = ServedApp(tmp_path_factory.mktemp("pg-faults"), self_approving=True, DATABASE_URL=postgres.url,
                    COUNTERSIGN_DB_POOL_TIMEOUT="5", COUNTERSIGN_POLL_INTERVAL="0.2")
    app.token = _setup(app.env, app.setup)  # the test's own server: no shared template
    app.launch().ready()
    yield app
    app.stop()


def paused_threads(api, count: int) -> list[dict]:
    """``count`` janitor threads, each waiting on one pending interrupt."""
    threads = [start(api, "janitor", "tidy")["thread"] for _ in range(count)]
    return [wait_for(lambda t=thread: pending(api, t), timeout=30)[0] for thread in threads]


def terminate_app_connections(postgres) -> int:
    return len(postgres.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'countersign' "
        "AND pid <> pg_backend_pid()"))


@in_pass("postgresql")
def test_requests_after_pg_terminate_backend_are_served_or_refused_503_never_500(postgres, pg_app):
    tally = Tally()
    rounds = 4
    with pg_app.api() as api, closing(logged_in(pg_app)) as browser:
        asked = paused_threads(api, rounds)
        for n, interrupt in enumerate(asked):
            assert terminate_app_connections(postgres) >= 1  # the app's pool held connections: all killed
            # Reads are retried on a fresh connection: they succeed.
            assert tally(api.get("/api/threads/")).status_code == 200  # the token check, then a list
            assert tally(api.get("/api/policies/")).status_code == 200
            assert tally(api.get(f"/api/interrupts/{interrupt['id']}/")).status_code == 200
            assert tally(browser.get("/inbox/"), machine=False).status_code == 200
            terminate_app_connections(postgres)
            assert tally(browser.get("/threads/"), machine=False).status_code == 200  # the session read first
            terminate_app_connections(postgres)
            # A write either went through or was refused with nothing changed; the same request then does.
            decided = tally(api.post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": "approve"}))
            if decided.status_code == 503:
                decided = tally(api.post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": "approve"}))
            assert decided.status_code == 201, decided.text
            terminate_app_connections(postgres)
            streamed = tally(api.post("/agui/janitor/", json=new_input(f"pg-kill-{n}", f"pg-kill-{n}-r1")))
            if streamed.status_code == 200:
                types = [event["type"] for event in sse_events(streamed)]
                assert types[0] == "RUN_STARTED" and types[-1] in ("RUN_FINISHED", "RUN_ERROR"), types
    assert tally.statuses[500] == 0
    print(f"\npg_terminate_backend x {rounds * 4}: {tally}")


@in_pass("postgresql")
def test_a_postgresql_restart_is_answered_503_while_down_and_recovered_unaided(postgres, pg_app):
    tally = Tally()
    with pg_app.api() as api, closing(logged_in(pg_app)) as browser:
        [interrupt] = paused_threads(api, 1)
        postgres.stop()
        try:
            down = [tally(api.get("/api/threads/")), tally(api.get("/api/policies/")),
                    tally(api.post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": "approve"})),
                    tally(api.post("/agui/janitor/", json=new_input("pg-down", "pg-down-r1"))),
                    tally(browser.get("/inbox/"), machine=False)]
            assert [r.status_code for r in down] == [503] * len(down), [r.text[:300] for r in down]
            page = down[-1]
            assert "cannot answer just now" in page.text and "Content-Security-Policy" in page.headers
        finally:
            postgres.start()
        # Unaided: the pool replaces its connections once the server answers again.
        wait_for(lambda: tally(api.get("/api/threads/")).status_code == 200, timeout=60, interval=0.2)
        assert tally(browser.get("/inbox/"), machine=False).status_code == 200
        # Nothing was changed while it was down: the interrupt still waits, and deciding it now works.
        assert tally(api.get(f"/api/interrupts/{interrupt['id']}/")).json()["status"] == "pending"
        decided = tally(api.post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": "approve"}))
        assert decided.status_code == 201, decided.text
    assert tally.statuses[500] == 0
    print(f"\nPostgreSQL restart: {tally}")


# --- SQLite: a full disk ----------------------------------------------------------------------

FILLER = "test_filler"


def _sqlite(path):
    return sqlite3.connect(path, timeout=20, isolation_level=None)


def fill(path) -> None:
    """Take every free page and grow the file: the app's connections may not grow it (SQLITE_NO_GROWTH)."""
    with closing(_sqlite(path)) as connection:
        connection.execute(f"CREATE TABLE IF NOT EXISTS {FILLER} (b BLOB)")
        free = connection.execute("PRAGMA freelist_count").fetchone()[0]
        page = connection.execute("PRAGMA page_size").fetchone()[0]
        connection.execute(f"INSERT INTO {FILLER} VALUES (zeroblob(?))", ((free + 16) * page,))
        assert connection.execute("PRAGMA freelist_count").fetchone()[0] == 0


def make_room(path, megabytes: int = 0) -> None:
    """Free pages the app may use again: the filler dropped, after growing it by ``megabytes`` first."""
    with closing(_sqlite(path)) as connection:
        connection.execute(f"CREATE TABLE IF NOT EXISTS {FILLER} (b BLOB)")
        if megabytes:
            connection.execute(f"INSERT INTO {FILLER} VALUES (zeroblob(?))", (megabytes * 1024 * 1024,))
        connection.execute(f"DROP TABLE {FILLER}")
        assert connection.execute("PRAGMA freelist_count").fetchone()[0] > 0


@pytest.fixture
def full_app(tmp_path):
    """An app on SQLite (whatever DATABASE_URL says) whose file may not grow: only its free pages are room."""
    path = tmp_path / "db.sqlite3"
    app = ServedApp(tmp_path, self_approving=True, DATABASE_URL=f"sqlite:///{path}", SQLITE_NO_GROWTH="1",
                    COUNTERSIGN_POLL_INTERVAL="0.2").prepare()
    make_room(path, megabytes=8)
    app.launch().ready()
    app.path = path
    yield app
    app.stop()


def counts(app) -> tuple:
    return tuple(app.query(f"SELECT COUNT(*) FROM {table}")[0][0]
                 for table in ("interrupts_thread", "interrupts_decision", "interrupts_auditentry", "interrupts_run"))


@in_pass("sqlite")
def test_a_full_sqlite_disk_refuses_writes_503_database_full_changes_nothing_and_recovers(full_app):
    tally = Tally()
    full = {"DATABASE_FULL"}
    with full_app.api() as api, closing(logged_in(full_app)) as browser:
        [interrupt] = paused_threads(api, 1)
        fill(full_app.path)
        before = counts(full_app)
        # A comment longer than a page: its row and entry need overflow pages, whatever room the last pages have.
        decided = tally(api.post(f"/api/interrupts/{interrupt['id']}/decide/",
                                 json={"action": "approve", "comment": "why " * 2000}), codes=full)
        assert decided.status_code == 503 and decided.json()["code"] == "DATABASE_FULL", decided.text
        assert decided.headers["Retry-After"] == "60"
        # A write that still fits in a page with room succeeds; the first that needs a new page is refused.
        refused = {}
        for _ in range(30):
            started = tally(api.post("/api/threads/", json={"agent": "janitor", "message": "tidy " * 200}),
                            codes=full)
            if started.status_code == 503:
                refused["thread"] = started.json()["code"]
                break
            assert started.status_code == 201, started.text
        for n in range(30):
            streamed = tally(api.post("/agui/janitor/", json=new_input(f"full-gw-{n}", f"full-gw-{n}-r1",
                                                                       state={"pad": "x" * 2000})), codes=full)
            if streamed.status_code == 503:  # refused before the stream began
                refused["gateway"] = streamed.json()["code"]
                break
            events = sse_events(streamed)
            if events[-1]["type"] == "RUN_ERROR" and events[-1].get("code") == "DATABASE_FULL":
                # Refused as the stream began: nothing was recorded, so no thread.
                assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_ERROR"], events
                assert tally(api.get(f"/api/threads/full-gw-{n}/")).status_code == 404
                refused["gateway"] = "DATABASE_FULL"
                break
        assert refused == {"thread": "DATABASE_FULL", "gateway": "DATABASE_FULL"}, refused
        # Reads still work; nothing was half-applied.
        assert tally(api.get(f"/api/interrupts/{interrupt['id']}/")).json()["status"] == "pending"
        assert tally(browser.get("/inbox/"), machine=False, codes=full).status_code in (200, 503)
        # The refused decision left no decision or audit entry (threads the loops above made are theirs).
        assert counts(full_app)[1:3] == before[1:3]
        # Room again: the same requests go through, unaided.
        make_room(full_app.path)
        decided = tally(api.post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": "approve"}))
        assert decided.status_code == 201, decided.text
        assert tally(api.post("/api/threads/", json={"agent": "janitor", "message": "tidy"})).status_code == 201
        assert tally(browser.get("/inbox/"), machine=False).status_code == 200
    assert tally.statuses[500] == 0
    print(f"\nSQLite disk full: {tally}")
