import contextlib
import re
import subprocess
import time

import httpx
import pytest

from ..agui import post_run
from ..servers import ROOT, ServedApp, free_port
from .scripted_agent import ScriptedAgent


@pytest.fixture(scope="session")
def scripted():
    agent = ScriptedAgent().start()
    yield agent
    agent.stop()


@pytest.fixture(scope="session")
def hub(tmp_path_factory, scripted):
    """The app under `manage.py serve`, with short timeouts so faults show quickly."""
    app = ServedApp(
        tmp_path_factory.mktemp("hub"), self_approving=True,
        COUNTERSIGN_IDLE_TIMEOUT="1.5",
        COUNTERSIGN_AFTER_TERMINAL_GRACE="0.5",
        COUNTERSIGN_POLL_INTERVAL="0.2",
        COUNTERSIGN_RETRY_BASE="0.2",
        COUNTERSIGN_RETRY_ATTEMPTS="3",
        DEMO_FILING_EXPIRES_IN="2",
    ).start()
    with app.api() as api:
        for name in [
            "approve",
            "no-snapshot",
            "legacy",
            "malformed",
            "unknown-type",
            "error-first",
            "no-terminal",
            "after-end",
            "agent-error",
            "interrupt-then-noise",
            "duplicate-ids",
            "slow-finish",
            "wrong-run",
            "empty-interrupts",
            "http-422",
            "html",
            "silent",
            "linger",
            "refuse-error",
            "refuse-early",
            "refuse-http",
            "refuse-fault",
            "frontend-tool",
            "frontend-tool-silent",
            "newer-version",
        ]:
            response = api.post("/api/agents/", json={"name": f"x-{name}", "url": f"{scripted.url}/{name}/"})
            assert response.status_code == 201, response.text
        # A port nobody listens on: connection refused.
        response = api.post("/api/agents/", json={"name": "x-refused", "url": "http://127.0.0.1:9/refused/"})
        assert response.status_code == 201, response.text
    yield app
    app.stop()


@pytest.fixture
def api(hub):
    with hub.api() as client:
        yield client


def logged_in(app) -> httpx.Client:
    """A browser-like client of ``app``, logged in as the demo reviewer through the login form."""
    browser = httpx.Client(base_url=app.url, follow_redirects=False, timeout=30)
    page = browser.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = browser.post("/accounts/login/", headers={"Referer": f"{app.url}/accounts/login/"},
                            data={"username": "reviewer", "password": "countersign", "csrfmiddlewaretoken": token})
    assert response.status_code == 302, response.text
    return browser


def wait_for(check, timeout=15.0, interval=0.05):
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {getattr(check, '__name__', check)}")
        time.sleep(interval)


def run_of(api, run_id, thread=None):
    return api.get(f"/api/runs/{run_id}/", params={"thread": thread} if thread else None).json()


def finished_run(api, run_id, thread=None):
    """Wait for a run to leave queued/streaming, and return it."""
    return wait_for(lambda: (r := run_of(api, run_id, thread))["status"] not in ("queued", "streaming") and r)


def events(api, thread_id, after=0):
    return api.get(f"/api/threads/{thread_id}/events/", params={"after": after, "limit": 1000}).json()["events"]


def pending(api, thread_id):
    return api.get("/api/interrupts/", params={"thread": thread_id}).json()["results"]


def start(api, agent, message=None):
    body = {"agent": agent}
    if message:
        body["message"] = message
    response = api.post("/api/threads/", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def decide(api, interrupt, **body):
    """Decide ``interrupt`` through the API; the decision, which must be recorded."""
    response = api.post(f"/api/interrupts/{interrupt['id']}/decide/", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def resumed(api, interrupt):
    """The run that sent ``interrupt``'s batch back, once it ended."""
    detail = wait_for(lambda: (d := api.get(f"/api/interrupts/{interrupt['id']}/").json())["resumed_by"] and d)
    return finished_run(api, detail["resumed_by"])


def state(api, thread):
    return api.get(f"/api/threads/{thread}/").json()["state"]


def paused(api, agent):
    """A new thread of ``agent`` whose first run paused on one interrupt: (its run, the interrupt)."""
    run = start(api, agent)
    assert finished_run(api, run["run_id"])["status"] == "interrupted"
    [asked] = wait_for(lambda: pending(api, run["thread"]))
    return run, asked


@pytest.fixture
def gateway(hub):
    """POST a RunAgentInput to ``/agui/<agent>/`` as the demo reviewer; the stream, which ag-ui-validate passed."""
    headers = {"Authorization": f"Token {hub.token}"}

    async def call(agent: str, body: dict):
        streamed = await post_run(f"{hub.url}/agui/{agent}/", body, headers=headers)
        assert streamed.status == 200
        # The gateway relays agents' events as they were sent, so an agent's
        # own style (no timestamps: "info") is not the gateway's to fix.
        assert streamed.problems(severities=("error", "warning")) == []
        return streamed

    return call


def new_input(thread: str, run: str = "r1", **fields) -> dict:
    return {"threadId": thread, "runId": run, "messages": [], "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, **fields}


def peer_python(name: str):
    """The Python of the framework ``name``'s own venv (``.venv-<name>``, built by ``make peers``)."""
    python = ROOT / f".venv-{name}" / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: `make test` creates it from tests/external/requirements-{name}.txt")
    return python


LANGGRAPH_PYTHON = ROOT / ".venv-langgraph" / "bin" / "python"


@contextlib.contextmanager
def external_agent(command: list, workdir, *, ready: str = "ready on", timeout: float = 90):
    """An agent written with another framework, in its own process, until it prints ``ready``: yields its log.

    Started from the project's root; its output goes to ``workdir/agent.log``,
    which a failing test shows. SIGTERM, then SIGKILL after 3 s, at the end.
    """
    log = workdir / "agent.log"
    with open(log, "w") as out:
        process = subprocess.Popen([str(part) for part in command], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: ready in log.read_text() or process.poll() is not None, timeout=timeout)
        assert process.poll() is None, log.read_text()
        yield log
    finally:
        process.terminate()
        try:
            process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def langgraph_agent(workdir, *options: str):
    """The LangGraph agent (tests/external) in its own process and venv, on a free port: yields the port."""
    port = free_port()
    with external_agent([peer_python("langgraph"), "tests/external/langgraph_agent.py", "--port", port, *options],
                        workdir, timeout=60):
        yield port


@pytest.fixture(scope="session")
def langgraph(tmp_path_factory, hub):
    """The LangGraph agent, as ag-ui-langgraph serves it with emit_interrupt_outcome, registered with the hub."""
    with langgraph_agent(tmp_path_factory.mktemp("langgraph")) as port:
        with hub.api() as api:
            for path in ("approve", "form", "form-short", "parallel"):
                response = api.post("/api/agents/", json={"name": f"lg-{path}", "url": f"http://127.0.0.1:{port}/{path}/"})
                assert response.status_code == 201, response.text
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def redis_url():
    """A Redis for tests that need one: REDIS_URL if set, else the one `bin/services` starts.

    Tests of several server processes need a channel layer that crosses
    processes; they never skip for want of one.
    """
    import os

    if os.environ.get("REDIS_URL"):
        return os.environ["REDIS_URL"]
    done = subprocess.run([str(ROOT / "bin" / "services")], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, f"bin/services failed:\n{done.stdout}\n{done.stderr}"
    found = [line.split("=", 1)[1] for line in done.stdout.splitlines() if line.startswith("REDIS_URL=")]
    assert found, f"bin/services printed no REDIS_URL:\n{done.stdout}"
    return found[0]


def in_pass(back_end: str):
    """Run a test of a private server's fault in one of CI's two passes, named here, not in both.

    The fault is the test's own (a PostgreSQL, Redis or SQLite file it starts
    and breaks), so the pass's DATABASE_URL does not change what it checks:
    "sqlite" runs it in the first pass, "postgresql" (PostgreSQL + Redis) in
    the second. `.ci/run` always runs both, so neither is skipped in CI.
    """
    import os

    scale = os.environ.get("DATABASE_URL", "").startswith("postgres")
    wanted = back_end == "postgresql"
    return pytest.mark.skipif(scale != wanted, reason=f"a private server's fault: runs in CI's {back_end} pass")


def session_cookie(app) -> str:
    """Log in as the demo reviewer through ``app``'s login page; the session cookie's value."""
    with httpx.Client(base_url=app.url) as browser:
        csrf = browser.get("/accounts/login/").cookies["csrftoken"]
        response = browser.post("/accounts/login/", data={"username": "reviewer", "password": "countersign",
                                                          "csrfmiddlewaretoken": csrf},
                                headers={"Referer": f"{app.url}/"})
        assert response.status_code == 302, response.text
        return browser.cookies["sessionid"]
