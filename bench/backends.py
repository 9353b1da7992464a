"""What the end-to-end benchmarks run against: the two back ends, served apps, the bench agent.

Every benchmark runs on SQLite with the in-memory channel layer, and, when
DATABASE_URL (postgres://…) and REDIS_URL are set (``make bench`` starts both
with ``bin/services``), on PostgreSQL with Redis in the same invocation. The
app is ``manage.py serve`` started by the tests' ``ServedApp``; the agent is
``bench/agent.py`` in a process of its own. Everything started here is stopped
on exit, on Ctrl-C and on SIGTERM (``timeout`` in the Makefile sends one).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from tests.servers import ServedApp, free_port, stop_process  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_running: list = []  # everything started and not yet stopped, newest last
_static_collected = False


@dataclass(frozen=True)
class Backend:
    name: str  # "sqlite" or "postgres": the key in tables and JSON
    label: str
    database_url: str = ""  # PostgreSQL server to create databases on; "" for SQLite
    redis_url: str = ""


SQLITE = Backend("sqlite", "SQLite + in-memory layer")


def backends(wanted: str = "all") -> list[Backend]:
    """SQLite, and PostgreSQL + Redis when the environment names them."""
    found = [SQLITE]
    database, redis = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    if database.startswith("postgres") and redis:
        found.append(Backend("postgres", "PostgreSQL + Redis", database, redis))
    elif wanted in ("all", "postgres"):
        print("(PostgreSQL + Redis skipped: DATABASE_URL=postgres://… and REDIS_URL are not both set; "
              "`make bench` starts them with bin/services)")
    return [b for b in found if wanted in ("all", b.name)]


def arguments(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--backend", choices=("all", "sqlite", "postgres"), default="all")
    return parser


@contextlib.contextmanager
def environ(**values: str | None) -> Iterator[None]:
    """Set (or, for None, remove) environment variables for the block."""
    saved = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def drop_database(url: str) -> None:
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_database(server_url: str, name: str) -> str:
    """A fresh, empty database on the PostgreSQL server of ``server_url``; its URL."""
    import psycopg

    base = server_url.rsplit("/", 1)[0]
    with psycopg.connect(server_url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')
    return f"{base}/{name}"


# The benchmarks measure the app as it is deployed, not as the tests run it:
# DEBUG off (with it on, Django keeps every query's SQL, a tenth of the relay's
# server time in one profile), static files collected. Plain HTTP on loopback,
# so no redirect to HTTPS; the bench's clients send their cookies themselves.
PRODUCTION = {
    "DJANGO_SETTINGS_MODULE": "project.settings",  # not the tests' (tests/served_settings.py)
    "DEBUG": "false",
    "SECRET_KEY": "bench-only-" + os.urandom(16).hex(),
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "SECURE_SSL_REDIRECT": "false",
}


def collect_static(env: dict) -> None:
    """Collect the static files, which Whitenoise serves when DEBUG is off (the manifest the pages name):
    once per benchmark, unless bench/run.py has (4 CPU-seconds; a minute when the machine is busy)."""
    global _static_collected
    if _static_collected or os.environ.get("BENCH_STATIC_COLLECTED"):
        return
    done = subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT,
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"collectstatic failed: {done.stderr}")
    _static_collected = True


class BenchApp(ServedApp):
    """``ServedApp`` on a chosen back end; a PostgreSQL database it made is dropped on stop."""

    def __init__(self, workdir: Path, backend: Backend, name: str = "serve", *, owns_database: bool = True,
                 **env: str) -> None:
        # ServedApp picks its database and channel layer from the environment.
        with environ(DATABASE_URL=backend.database_url or None, REDIS_URL=backend.redis_url or None):
            super().__init__(workdir, name, **{**PRODUCTION, **env})
        self.backend = backend
        self.owns_database = owns_database

    def prepare(self) -> BenchApp:
        if self.env.get("DEBUG") == "false":
            collect_static(self.env)
        # The demo reviewer (the bench's one person) is refused with DEBUG off, by
        # design; the database is the same whichever way the setup commands run.
        served_env, self.env = self.env, {**self.env, "DEBUG": "true"}
        try:
            super().prepare()
        finally:
            self.env = served_env
        return self

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_kib(self) -> int:
        """Resident memory of the server process (VmRSS in /proc/<pid>/status)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def database_written(self) -> int:
        """Bytes the database has written so far: PostgreSQL's WAL position (all its sessions, this database
        or not: measure on an otherwise idle server), or on SQLite the server process's own writes to storage
        (``write_bytes`` in /proc/<pid>/io: the database file and its WAL, counted as pages are dirtied)."""
        if not self.backend.database_url:
            for line in Path(f"/proc/{self.pid}/io").read_text().splitlines():
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
            raise RuntimeError("no write_bytes")
        import psycopg

        with psycopg.connect(self.env["DATABASE_URL"], autocommit=True) as connection:
            return int(connection.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])

    def database_stats(self) -> dict | None:
        """PostgreSQL's counters for the app's database (transactions, rows, sessions); None on SQLite."""
        if not self.backend.database_url:
            return None
        import psycopg

        url = self.env["DATABASE_URL"]
        with psycopg.connect(url, autocommit=True) as connection:
            row = connection.execute(
                "SELECT xact_commit, tup_inserted, tup_updated, tup_returned + tup_fetched, sessions "
                "FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
        return dict(zip(("transactions", "inserted", "updated", "read", "sessions"), row, strict=False))

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            if self.backend.database_url and self.owns_database:
                drop_database(self.env["DATABASE_URL"])


class BenchCluster:
    """``count`` ``manage.py serve`` processes of one deployment: one database, one Redis channel prefix.

    As ``tests.servers.cluster`` starts them (the first migrates, all launch
    together); the database is dropped once, after every process has stopped.
    """

    def __init__(self, workdir: Path, backend: Backend, count: int, **env: str) -> None:
        self.backend = backend
        self.apps = [BenchApp(workdir, backend, f"serve-{n}", owns_database=False, **env) for n in range(count)]

    def start(self) -> BenchCluster:
        first = self.apps[0].prepare()
        for app in self.apps[1:]:
            app.token = first.token
        for app in self.apps:
            app.launch()
        for app in self.apps:
            app.ready()
        return self

    def cpu_seconds(self) -> float:
        return sum(app.cpu_seconds() for app in self.apps)

    def stop(self) -> None:
        try:
            for app in self.apps:  # all asked at once, so they shut down side by side
                if app.process and app.process.poll() is None:
                    app.process.terminate()
            for app in self.apps:
                app.stop()
        finally:
            if self.backend.database_url:
                drop_database(self.apps[0].env["DATABASE_URL"])


def _die_with_parent() -> None:
    # Linux: the agent gets SIGTERM if the benchmark dies, even by SIGKILL.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class AgentProcess:
    """``bench/agent.py`` on a free port."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.logfile = workdir / "agent.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> AgentProcess:
        with open(self.logfile, "w") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(BENCH / "agent.py"), "--port", str(self.port)],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if "listening" in self.logfile.read_text():
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the bench agent did not start:\n{self.logfile.read_text()}")

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    def log(self) -> dict:
        import httpx

        return httpx.get(self.url("/log/"), timeout=30).json()

    def stop(self) -> None:
        stop_process(self.process)


def _stop_everything() -> None:
    while _running:
        thing = _running.pop()
        try:
            thing.stop()
        except Exception as problem:  # keep stopping the rest
            print(f"could not stop {thing!r}: {problem}", file=sys.stderr)


def _terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)


atexit.register(_stop_everything)
signal.signal(signal.SIGTERM, _terminated)


@contextlib.contextmanager
def started(thing):
    """Start ``thing`` (a BenchApp or AgentProcess) for the block; it stops however the block ends."""
    _running.append(thing)
    try:
        thing.start()
        yield thing
    finally:
        if thing in _running:
            _running.remove(thing)
        thing.stop()


@contextlib.contextmanager
def workdir(prefix: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=f"bench-{prefix}-") as folder:
        yield Path(folder)


@contextlib.contextmanager
def served(backend: Backend, prefix: str, **env: str) -> Iterator[BenchApp]:
    with workdir(f"{prefix}-{backend.name}") as folder, started(BenchApp(folder, backend, **env)) as app:
        yield app


@contextlib.contextmanager
def served_cluster(backend: Backend, prefix: str, count: int, **env: str) -> Iterator[BenchCluster]:
    """``count`` server processes sharing one database (and, on Redis, one channel prefix) for the block."""
    with workdir(f"{prefix}-{backend.name}-x{count}") as folder, \
            started(BenchCluster(folder, backend, count, **env)) as deployment:
        yield deployment


@contextlib.contextmanager
def agent(prefix: str) -> Iterator[AgentProcess]:
    with workdir(f"{prefix}-agent") as folder, started(AgentProcess(folder)) as process:
        yield process


def register_agent(app: ServedApp, name: str, url: str) -> None:
    """Register an agent through the REST API (POST /api/agents/, staff only).

    With a policy letting the demo reviewer approve the runs they start: the
    benchmarks are one person starting runs and deciding them.
    """
    with app.api() as api:
        response = api.post("/api/agents/", json={"name": name, "url": url})
        if response.status_code != 201:
            raise RuntimeError(f"POST /api/agents/ {name}: {response.status_code} {response.text}")
        response = api.post("/api/policies/", json={"name": f"bench: {name}", "agent": name,
                                                    "allow_self_approval": True})
        if response.status_code != 201:
            raise RuntimeError(f"POST /api/policies/ {name}: {response.status_code} {response.text}")


def session_cookie(app: ServedApp, username: str = "reviewer", password: str = "countersign") -> str:
    """Log in through /accounts/login/ (with its CSRF token) as a browser does; the Cookie header."""
    import httpx

    # Cookies by hand: with DEBUG off they are Secure, which a client keeps from plain HTTP.
    with httpx.Client(base_url=app.url, timeout=30) as browser:
        token = browser.get("/accounts/login/").cookies["csrftoken"]
        response = browser.post(
            "/accounts/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": token},
            headers={"Referer": f"{app.url}/accounts/login/", "Cookie": f"csrftoken={token}"},
        )
        if "sessionid" not in response.cookies:
            raise RuntimeError(f"login as {username} failed: HTTP {response.status_code}")
        cookies = {"csrftoken": token, **dict(response.cookies.items())}
        return "; ".join(f"{name}={value}" for name, value in cookies.items())


def ws_url(app: ServedApp, path: str) -> str:
    return app.url.replace("http://", "ws://", 1) + path


#: A run's statuses once it has ended.
FINAL = ("interrupted", "succeeded", "failed", "cancelled")


async def wait_run(api, run_id: str, timeout: float = 60) -> dict:
    """The run ``run_id`` once it has ended, read from the API (``api``: an httpx.AsyncClient with the token)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = (await api.get(f"/api/runs/{run_id}/")).json()
        if run["status"] in FINAL:
            return run
        await asyncio.sleep(0.05)
    raise TimeoutError(f"run {run_id} did not end within {timeout} s")
