"""Real servers for end-to-end tests: `manage.py serve` as `make serve` runs it."""

import atexit
import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The served apps' settings (tests/served_settings.py): the app's own, with a cheap password hash.
SERVED_SETTINGS = "tests.served_settings"


def database_for(workdir: Path) -> str:
    """The database of the test server in ``workdir``: a SQLite file, or, when the
    suite runs against PostgreSQL (DATABASE_URL), a database of its own there.
    It is created by ``ServedApp.prepare`` (from a prepared template when it is new)."""
    base = os.environ.get("DATABASE_URL", "")
    if not base.startswith("postgres"):
        return f"sqlite:///{workdir / 'db.sqlite3'}"
    name = "cs_" + hashlib.sha1(str(workdir).encode()).hexdigest()[:16]
    return base.rsplit("/", 1)[0] + "/" + name


def _pg_exists(admin, name: str) -> bool:
    return admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


#: The PostgreSQL databases this process created, dropped when it exits: left behind, a few
#: hundred runs' worth (3 GB) made PostgreSQL's start after an unclean stop fsync for minutes.
_CREATED: set[str] = set()


def _create_database(admin, name: str, template: str | None = None) -> None:
    if not _CREATED:
        atexit.register(_drop_created)
    clause = f' TEMPLATE "{template}"' if template else ""
    admin.execute(f'CREATE DATABASE "{name}"{clause}')
    _CREATED.add(name)


def _drop_created() -> None:
    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as admin:
        for name in _CREATED:
            # FORCE: a server a test left running, or its pool, still holds a connection.
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


#: One prepared database per kind of app (``Setup``) and back end: (location, the demo reviewer's
#: token). Every new app's database is a copy of it, which spares each of the suite's ~45 served
#: apps a migration and three Django start-ups (4 CPU-seconds each on 2 cores).
_TEMPLATES: dict[tuple["Setup", bool], tuple[str, str]] = {}


@dataclass(frozen=True)
class Setup:
    """What a served app's database holds beyond `make serve`'s: a policy letting the demo reviewer
    approve their own runs (one operator), and Alice, a second reviewer (the browser's colleague);
    and the settings that made it, whose password hasher its logins need (the benchmarks' apps
    run the app's own, ``project.settings``, and hash as deployed)."""

    self_approving: bool = False
    colleague: bool = False
    settings: str = SERVED_SETTINGS

    @property
    def name(self) -> str:
        return (("sa" if self.self_approving else "plain") + ("_alice" if self.colleague else "")
                + ("" if self.settings == SERVED_SETTINGS else "_deployed"))

    def code(self) -> str:
        code = ""
        if self.self_approving:
            code += ("from interrupts.hub import policies; policies.get_or_create(agent=None, reason='', "
                     "tool_name='', defaults={'name': 'one operator', 'allow_self_approval': True}); ")
        if self.colleague:
            code += ("from django.contrib.auth import get_user_model; from django.contrib.auth.models import Group; "
                     "get_user_model().objects.create_user('alice', password='alice-pass-1234', first_name='Alice')"
                     ".groups.add(Group.objects.get(name='Reviewers')); ")
        return code


def _run() -> str:
    """The pytest run this process works for (``tests/conftest.py`` names it): its workers share
    one template per kind, which that run drops at its end. Empty outside one (a benchmark)."""
    return os.environ.get("COUNTERSIGN_TEST_RUN", "")


def _run_folder(run: str) -> Path:
    """Where the run's SQLite templates and their tokens are kept."""
    folder = Path(tempfile.gettempdir()) / f"cs-template-{run}"
    folder.mkdir(exist_ok=True)
    return folder


def _template_location(setup: Setup, sqlite: bool) -> str:
    # One template per back end: a benchmark serves SQLite apps while DATABASE_URL names
    # PostgreSQL, and a SQLite app copied from a PostgreSQL template got an empty file.
    kind, run = setup.name, _run()
    if sqlite:
        if run:
            folder = _run_folder(run)
        else:
            folder = Path(tempfile.mkdtemp(prefix="cs-template-"))
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
        return f"sqlite:///{folder / kind}.sqlite3"
    return os.environ["DATABASE_URL"].rsplit("/", 1)[0] + f"/cs_template_{run or os.getpid()}_{kind}"


def _build_template(url: str, setup: Setup) -> str:
    if url.startswith("postgres"):
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as admin:
            if _pg_exists(admin, name):
                admin.execute(f'DROP DATABASE "{name}"')
            if _run():
                admin.execute(f'CREATE DATABASE "{name}"')  # the run drops it (drop_run_templates)
            else:
                _create_database(admin, name)
    return _setup({**os.environ, "DATABASE_URL": url, "DEBUG": "true", "DJANGO_SETTINGS_MODULE": setup.settings},
                  setup)


def _template(setup: Setup, sqlite: bool) -> tuple[str, str]:
    key = (setup, sqlite)
    if key not in _TEMPLATES:
        url = _template_location(setup, sqlite)
        if not (run := _run()):
            token = _build_template(url, setup)
        else:
            # The first of the run's workers to need this kind builds it; the others wait, then read its token.
            with open(_run_folder(run) / (url.rsplit("/", 1)[1] + ".token"), "a+") as made:
                fcntl.flock(made, fcntl.LOCK_EX)
                made.seek(0)
                token = made.read().strip()
                if not token:
                    token = _build_template(url, setup)
                    made.write(token)
        _TEMPLATES[key] = (url, token)
    return _TEMPLATES[key]


def drop_run_templates() -> None:
    """Drop the templates this pytest run's workers shared (called once, when the run ends)."""
    if not (run := _run()):
        return
    shutil.rmtree(Path(tempfile.gettempdir()) / f"cs-template-{run}", ignore_errors=True)
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        import psycopg

        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as admin:
            names = admin.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                                  (f"cs_template_{run}_%",)).fetchall()
            for (name,) in names:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _setup(env: dict, setup: Setup) -> str:
    """What `make serve` does to a database before serving: migrate, the demo reviewer; returns its API token."""
    # The same commands, in one Django process rather than three or four (seconds each on a busy machine).
    code = ("import io; from django.core.management import call_command; quiet = io.StringIO(); "
            "call_command('migrate', interactive=False, stdout=quiet); call_command('demo_reviewer', stdout=quiet); ")
    code += setup.code() + "call_command('tokens', 'create', 'reviewer')"
    done = manage("shell", "-c", code, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]  # the token, alone on its line as `tokens create` prints it


def _copy_of_template(url: str, setup: Setup) -> str | None:
    """Make the database at ``url`` a copy of the prepared template, if it does not exist yet; its token."""
    template, token = _template(setup, url.startswith("sqlite:///"))
    if url.startswith("sqlite:///"):
        target = Path(url.removeprefix("sqlite:///"))
        if target.exists():
            return None
        source = Path(template.removeprefix("sqlite:///"))
        # The template's writer has exited, so its WAL (if any is left) is complete: copy it too.
        for suffix in ("", "-wal"):
            if Path(f"{source}{suffix}").exists():
                shutil.copyfile(f"{source}{suffix}", f"{target}{suffix}")
        return token
    import psycopg

    name, template_name = url.rsplit("/", 1)[1], template.rsplit("/", 1)[1]
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as admin:
        if _pg_exists(admin, name):
            return None
        _create_database(admin, name, template_name)
    return token


#: How long a test's server may take to stop on SIGTERM before it is killed. A server still holding
#: a browser's WebSockets or a webhook mid-send waited out a 10 s allowance (test_team_day's teardown
#: took 26 s, test_alerts' 10 s; now under 5), on each back end of a CI run near its 30 minutes.
#: No test asks anything of a server after stopping it.
STOP_WAIT_SECONDS = 3


def stop_process(process: subprocess.Popen | None) -> None:
    """Ask a process to stop (SIGTERM), and kill it if it has not within ``STOP_WAIT_SECONDS``."""
    if process and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def manage(*args, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


# The servers this test process has running: a failing test's report shows the end of each one's log.
RUNNING: set["ServedApp"] = set()


class ServedApp:
    """A migrated database and a daphne process serving the whole app on a free port.

    Apps made with the same ``workdir`` share its database and, with Redis, its
    channel prefix: ``sibling`` (or ``cluster``) makes several server processes
    of one deployment, each with its own port and ``<name>.log``.
    """

    def __init__(self, workdir: Path, name: str = "serve", *, self_approving: bool = False, colleague: bool = False,
                 **env: str) -> None:
        self.workdir = workdir
        self.name = name
        self.overrides = env
        # Resumes leave at once unless a test holds them for an undo (COUNTERSIGN_UNDO_SECONDS).
        self.env = {**os.environ, "DATABASE_URL": database_for(workdir), "DEBUG": "true",
                    "DJANGO_SETTINGS_MODULE": SERVED_SETTINGS, "COUNTERSIGN_UNDO_SECONDS": "0", **env}
        # A deployment with one operator: a policy for every agent lets the
        # demo reviewer approve the runs they start (the site default does not).
        self.setup = Setup(self_approving, colleague, self.env["DJANGO_SETTINGS_MODULE"])
        if self.env.get("REDIS_URL") and "COUNTERSIGN_CHANNEL_PREFIX" not in env:
            # One Redis for every test server: each deployment (workdir) gets its own key prefix.
            self.env["COUNTERSIGN_CHANNEL_PREFIX"] = "cs" + hashlib.sha1(str(workdir).encode()).hexdigest()[:10]
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"{name}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> "ServedApp":
        self.prepare()
        return self.launch().ready()

    def prepare(self) -> "ServedApp":
        """Migrate the database, create the demo reviewer and note its API token.

        A new database is a copy of one prepared so once per test process; one that
        exists already (a restarted deployment) is migrated and read as it is.
        """
        token = _copy_of_template(self.env["DATABASE_URL"], self.setup)
        self.token = token if token is not None else _setup(self.env, self.setup)
        return self

    def empty_database(self) -> "ServedApp":
        """Create this app's database empty (on PostgreSQL; SQLite makes its file), for a caller that
        migrates it itself instead of ``prepare`` (production settings refuse the demo reviewer)."""
        url = self.env["DATABASE_URL"]
        if url.startswith("postgres"):
            import psycopg

            name = url.rsplit("/", 1)[1]
            with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as admin:
                if not _pg_exists(admin, name):
                    _create_database(admin, name)
        return self

    def launch(self) -> "ServedApp":
        """Start `manage.py serve` without waiting for it (see ``ready``)."""
        # Output goes to a file, not a pipe nobody drains: a full pipe would
        # block the server mid-test.
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "serve", "--port", str(self.port)],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            )
        RUNNING.add(self)
        return self

    def ready(self, timeout: float = 120) -> "ServedApp":
        """Wait until the launched server listens; stop it and fail if it does not."""
        # Usually a second or two; on a machine shared by several test runs it took over 30.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if f"listening on {self.url}/" in self.log.read_text():
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"serve did not start:\n{self.log.read_text()}")

    def sibling(self, name: str) -> "ServedApp":
        """Another server process of this deployment: same database, channel prefix and settings."""
        other = ServedApp(self.workdir, name, self_approving=self.setup.self_approving,
                          colleague=self.setup.colleague, **self.overrides)
        other.token = self.token
        return other

    def query(self, sql: str, *params) -> list[tuple]:
        """Rows of a read-only SQL query on this app's database (``%s`` placeholders)."""
        url = self.env["DATABASE_URL"]
        if url.startswith("sqlite:///"):
            import sqlite3

            connection = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=20)
            try:
                return connection.execute(sql.replace("%s", "?"), params).fetchall()
            finally:
                connection.close()
        import psycopg

        with psycopg.connect(url, autocommit=True) as connection:
            return connection.execute(sql, params).fetchall()

    @property
    def worker_pid(self) -> str:
        """How this process appears in ``Run.claimed_by`` (``host:pid:nonce``): its pid."""
        return str(self.process.pid)

    def api(self, **kwargs):
        """An httpx client for the REST API, authenticated as the demo reviewer by token."""
        import httpx

        return httpx.Client(base_url=self.url, headers={"Authorization": f"Token {self.token}"}, timeout=30, **kwargs)

    def stop(self) -> None:
        RUNNING.discard(self)
        stop_process(self.process)


def cluster(workdir: Path, count: int, *, self_approving: bool = False, **env: str) -> list[ServedApp]:
    """``count`` server processes sharing one database (and channel prefix), started together."""
    first = ServedApp(workdir, "serve-0", self_approving=self_approving, **env).prepare()
    apps = [first] + [first.sibling(f"serve-{n}") for n in range(1, count)]
    try:
        for app in apps:
            app.launch()
        for app in apps:
            app.ready()
    except BaseException:
        stop_all(apps)
        raise
    return apps


def stop_all(apps: list[ServedApp]) -> None:
    """Stop several servers, letting them shut down side by side rather than one after another."""
    for app in apps:
        if app.process and app.process.poll() is None:
            app.process.terminate()
    for app in apps:
        app.stop()
