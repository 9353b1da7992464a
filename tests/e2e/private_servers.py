"""A PostgreSQL and a Redis of a test's own, to stop and start: the shared ones serve other tests.

Each runs on a free port from a temporary directory and is removed at the end.
Under CI a missing server program fails the test (``missing``); elsewhere it skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from ..servers import free_port
from .conftest import wait_for


def missing(what: str) -> None:
    """A prerequisite is not installed: fail under CI (a skipped fault test proves nothing), else skip."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} is needed for this test and is not installed")
    pytest.skip(f"{what} is not installed")


def _poll(check, timeout: float, what: str):
    try:
        return wait_for(check, timeout)
    except AssertionError:
        raise AssertionError(f"timed out waiting for {what}") from None


def _postgres_bin() -> Path | None:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if versions:
        return versions[-1].parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


class PrivatePostgres:
    """A PostgreSQL cluster of its own (initdb into a temporary directory), trusted on 127.0.0.1."""

    def __init__(self) -> None:
        self.bin = _postgres_bin()
        if self.bin is None:
            missing("PostgreSQL (initdb)")
        self.root = Path(tempfile.mkdtemp(prefix="cs-private-pg-"))
        self.data, self.log = self.root / "data", self.root / "postgres.log"
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/countersign"
        # PostgreSQL refuses to run as root: as root, it runs as the postgres user.
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(self.root, "postgres")

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        done = subprocess.run([*self.as_user, *args], capture_output=True, text=True, timeout=timeout, check=False)
        assert done.returncode == 0, f"{args[0]} failed:\n{done.stdout}\n{done.stderr}"
        return done

    def create(self) -> PrivatePostgres:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync",
                  "-E", "UTF8", "--locale=C")
        self.start()
        import psycopg

        with psycopg.connect(self.url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
            admin.execute("CREATE DATABASE countersign")
        return self

    def start(self) -> None:
        # Its socket in its own directory: never the shared cluster's /var/run/postgresql.
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def execute(self, sql: str) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as connection:
            cursor = connection.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def remove(self) -> None:
        subprocess.run([*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateRedis:
    """A redis-server of its own on a free port, keeping nothing on disk."""

    def __init__(self) -> None:
        self.program = shutil.which("redis-server")
        if self.program is None:
            missing("redis-server")
        self.root = Path(tempfile.mkdtemp(prefix="cs-private-redis-"))
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> PrivateRedis:
        with open(self.root / "redis.log", "a") as log:
            self.process = subprocess.Popen(
                [self.program, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(self.root)], stdout=log, stderr=subprocess.STDOUT)
        _poll(self._answers, 10, "redis-server to answer")
        return self

    def _answers(self) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
