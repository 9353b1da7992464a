import pytest

from ..servers import ServedApp
from .agents import MAX_EVENT_BYTES, MAX_RUN_BYTES, MAX_RUN_EVENTS, SCRIPTS, LimitsAgent

# Small enough that a test crosses it with a few hundred kilobytes.
MAX_REQUEST_BYTES = 256 * 1024


@pytest.fixture(scope="session")
def limits_agent():
    agent = LimitsAgent().start()
    yield agent
    agent.stop()


@pytest.fixture(scope="session")
def doors(tmp_path_factory, limits_agent):
    """The app under `manage.py serve` with small limits, on a database of its own
    (the schemathesis test writes whatever it likes there)."""
    app = ServedApp(
        tmp_path_factory.mktemp("doors"), self_approving=True,
        COUNTERSIGN_MAX_EVENT_BYTES=str(MAX_EVENT_BYTES),
        COUNTERSIGN_MAX_RUN_EVENTS=str(MAX_RUN_EVENTS),
        COUNTERSIGN_MAX_RUN_BYTES=str(MAX_RUN_BYTES),
        COUNTERSIGN_MAX_REQUEST_BYTES=str(MAX_REQUEST_BYTES),
        COUNTERSIGN_POLL_INTERVAL="0.2",
        COUNTERSIGN_AFTER_TERMINAL_GRACE="0.5",
        # A run whose streaming broke down is settled (WORKER_LOST) within seconds, not half a minute.
        COUNTERSIGN_LEASE_SECONDS="6",
    ).start()
    with app.api() as api:
        for name in [*SCRIPTS, "http-error-nul"]:
            response = api.post("/api/agents/", json={"name": f"x-{name}", "url": f"{limits_agent.url}/{name}/"})
            assert response.status_code == 201, response.text
    yield app
    app.stop()


@pytest.fixture
def api(doors):
    with doors.api() as client:
        yield client
