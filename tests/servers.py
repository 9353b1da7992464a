"""Real servers for end-to-end tests: `manage.py serve` as `make serve` runs it."""

import hashlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def database_for(workdir: Path) -> str:
    """The database of the test server in ``workdir``: a SQLite file, or, when the
    suite runs against PostgreSQL (DATABASE_URL), a database of its own there."""
    base = os.environ.get("DATABASE_URL", "")
    if not base.startswith("postgres"):
        return f"sqlite:///{workdir / 'db.sqlite3'}"
    import psycopg

    name = "cs_" + hashlib.sha1(str(workdir).encode()).hexdigest()[:16]
    with psycopg.connect(base, autocommit=True) as connection:
        exists = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            connection.execute(f'CREATE DATABASE "{name}"')
    return base.rsplit("/", 1)[0] + "/" + name


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def manage(*args, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


class ServedApp:
    """A migrated database and a daphne process serving the whole app on a free port."""

    def __init__(self, workdir: Path, **env: str) -> None:
        self.workdir = workdir
        self.env = {**os.environ, "DATABASE_URL": database_for(workdir), "DEBUG": "true", **env}
        if os.environ.get("REDIS_URL"):
            # One Redis for every test server: each gets its own key prefix.
            self.env["COUNTERSIGN_CHANNEL_PREFIX"] = "cs" + hashlib.sha1(str(workdir).encode()).hexdigest()[:10]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "serve.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> "ServedApp":
        for command in (["migrate", "--noinput"], ["demo_reviewer"]):
            done = manage(*command, env=self.env)
            assert done.returncode == 0, done.stderr
        done = manage("drf_create_token", "reviewer", env=self.env)
        assert done.returncode == 0, done.stderr
        # "Generated token <key> for user reviewer"
        self.token = done.stdout.split()[2]
        # Output goes to a file, not a pipe nobody drains: a full pipe would
        # block the server mid-test.
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "serve", "--port", str(self.port)],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if f"listening on {self.url}/" in self.log.read_text():
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"serve did not start:\n{self.log.read_text()}")

    def api(self, **kwargs):
        """An httpx client for the REST API, authenticated as the demo reviewer by token."""
        import httpx

        return httpx.Client(base_url=self.url, headers={"Authorization": f"Token {self.token}"}, timeout=30, **kwargs)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
