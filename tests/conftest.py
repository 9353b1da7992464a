import multiprocessing
import os
import uuid

import pytest
from django.conf import settings as django_settings

# Channels' live-server machinery hangs the WebSocket handshake after earlier
# async tests when forked; spawned children start clean.
multiprocessing.set_start_method("spawn", force=True)

# Under pytest-xdist each worker is its own process with its own test database
# (pytest-django suffixes it) and temp dirs; the Redis channel layer, shared by
# every worker, gets a prefix per worker so one worker's groups never reach another's.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if WORKER and "prefix" in django_settings.CHANNEL_LAYERS["default"].get("CONFIG", {}):
    django_settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] += WORKER


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # PBKDF2's deliberate slowness is a cost tests need not pay.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def resumes_sent_at_once(settings):
    # COUNTERSIGN_UNDO_SECONDS holds each decision's resume for an undo; the
    # suite expects a decision to reach its agent at once. Tests of the hold set it.
    settings.COUNTERSIGN_UNDO_SECONDS = 0


@pytest.fixture(autouse=True)
def fresh_channel_layer():
    # Each test runs on an event loop of its own; a Redis channel layer built on an
    # earlier one keeps its per-channel receive locks bound to that loop, and a lock
    # a closed loop left held fails the next socket's listener ("bound to a
    # different event loop", seen on PostgreSQL + Redis). Each test builds its own.
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield


@pytest.fixture
async def closed_after():
    """After the test, the connections its database calls opened on asgiref's worker thread, closed
    there: PostgreSQL refuses to drop a test database a connection still holds."""
    yield
    from asgiref.sync import sync_to_async
    from django.db import connections

    await sync_to_async(connections.close_all)()


@pytest.fixture
def staff(client):
    """A superuser, logged in on Django's test ``client``."""
    from . import factories as make

    user = make.user(is_staff=True, is_superuser=True)
    client.force_login(user)
    return user


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """The whole app served by `manage.py serve` (daphne) on a free port, for the session."""
    from .servers import ServedApp

    app = ServedApp(tmp_path_factory.mktemp("served")).start()
    yield app
    app.stop()


#: Where the tests of pure code live (the protocol layer, the SDK, the docs, the import rules): what
#: they check is the same on either back end, so `make test-scale` leaves them to `make test`
#: (``-m "not backend_free"``). A test there that asks for the database is not one of them. Others
#: mark themselves (what a page looks like, settings read in a process of their own, each agent framework's wire).
BACKEND_FREE = {"protocol", "sdk", "docs", "test_purity.py"}
DATABASE_FIXTURES = {"db", "transactional_db", "django_db_setup", "live_server"}


def _parts(item) -> tuple[str, ...]:
    return item.path.relative_to(item.config.rootpath).parts


def _backend_free(item) -> bool:
    parts = _parts(item)
    return (len(parts) > 1 and parts[1] in BACKEND_FREE and item.get_closest_marker("django_db") is None
            and not DATABASE_FIXTURES & set(item.fixturenames))


@pytest.fixture
def private_redis():
    """A redis-server of the test's own (tests/e2e/private_servers.py), removed after it."""
    from .e2e.private_servers import PrivateRedis

    server = PrivateRedis().start()
    yield server
    server.remove()


def _tier(item) -> int:
    parts = _parts(item)
    return 2 if "browser" in parts else 1 if "e2e" in parts else 0


def pytest_collection_modifyitems(session, config, items):
    # The browser first, then end-to-end, then in-process: the longest files start first and
    # the many short ones even the workers out at the end (xdist keeps this order with
    # --no-loadscope-reorder; its default, most tests first, left the longest files last
    # and relaunched Chromium whenever a worker went back to the browser). The `e2e` and
    # `browser` markers let `-m "not e2e and not browser"` run the fast part.
    for item in items:
        tier = _tier(item)
        if tier == 1:
            item.add_marker(pytest.mark.e2e)
        elif tier == 2:
            item.add_marker(pytest.mark.browser)
        elif _backend_free(item):
            item.add_marker(pytest.mark.backend_free)
    items.sort(key=lambda item: -_tier(item))


def pytest_runtest_setup(item):
    # Playwright's sync API runs an event loop of its own, which must not overlap the async
    # tests: once a worker moves on from the browser tests, Chromium and that loop stop.
    if _tier(item) != 2:
        from .browser import chromium

        chromium.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    # A test that waited in vain on a server says what the server said meanwhile (its warnings and
    # tracebacks): a CI failure is read from its report, after the run's temporary files are gone.
    report = yield
    if report.when == "call" and report.failed:
        from .servers import RUNNING

        for app in sorted(RUNNING, key=lambda app: app.port):
            try:
                tail = app.log.read_text(errors="replace").splitlines()[-40:]
            except OSError:
                continue
            report.sections.append((f"the end of {app.log.name} ({app.url})", "\n".join(tail)))
    return report


def pytest_configure(config):
    # The run's name, inherited by its xdist workers: they share the served apps' template databases.
    if not hasattr(config, "workerinput"):
        os.environ.setdefault("COUNTERSIGN_TEST_RUN", uuid.uuid4().hex[:12])


def pytest_sessionfinish(session):
    from .browser import chromium

    chromium.close()
    if not hasattr(session.config, "workerinput"):  # the run itself, after all its workers
        from .servers import drop_run_templates

        drop_run_templates()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, tmp_path_factory):
    # The test database on SQLite is a file, as deployed: Django's default, an
    # in-memory database shared between threads, refuses a second writer at
    # once ("database table is locked") where a file waits its busy timeout,
    # and the hub writes from more than one thread (streaming has its own).
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        database.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("database") / "test.sqlite3")
