"""Every run ends: a maximum run time, operators who can stop a run, and stream limits.

A hostile agent here is a real HTTP server of this file (``Endless``): it
sends a TEXT_MESSAGE_CONTENT every 0.2 s for as long as the connection stays
open, faster than COUNTERSIGN_IDLE_TIMEOUT, and notes when Countersign closes
it. The apps are `manage.py serve` processes with small limits.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import httpx
import pytest

from ..loopback import LoopbackAgent, frame, start_stream, write
from ..servers import ROOT, ServedApp, manage
from .conftest import events, finished_run, pending, run_of, start, wait_for

MAX_STREAMS = 5  # per process; a fifth (1) is kept for resumes, so new runs get 4
AGENT_STREAMS = 2
PACE = 0.2  # seconds between an endless stream's deltas: far less than the apps' idle timeout (1.5 s)


class Endless(LoopbackAgent):
    """An AG-UI agent on a free port. ``/endless/`` streams forever; ``/ask/`` interrupts, then succeeds on resume."""

    def __init__(self) -> None:
        super().__init__()
        self.open: dict[str, int] = {}  # runId -> its stream is open (1) or was closed by Countersign (0)
        self.opened_at: dict[str, float] = {}
        self.closed_at: dict[str, float] = {}
        self.resumes: dict[str, float] = {}  # threadId -> when its resume POST arrived
        self.lock = threading.Lock()

    def answer(self, handler, path, body) -> None:
        start_stream(handler)
        ids = {"threadId": body["threadId"], "runId": body["runId"]}
        write(handler, frame({"type": "RUN_STARTED", **ids}))
        if path.startswith("ask"):
            self.ask(handler, body, ids)
        else:
            self.endless(handler, ids)

    def ask(self, handler, body, ids) -> None:
        if body.get("resume"):
            with self.lock:
                self.resumes[body["threadId"]] = time.monotonic()
            outcome = {"type": "success"}
        else:
            outcome = {"type": "interrupt", "interrupts": [{"id": "ok", "reason": "confirmation", "message": "Go?"}]}
        write(handler, frame({"type": "RUN_FINISHED", **ids, "outcome": outcome}))

    def endless(self, handler, ids) -> None:
        run = ids["runId"]
        with self.lock:
            self.open[run] = 1
            self.opened_at[run] = time.monotonic()
        write(handler, frame({"type": "TEXT_MESSAGE_START", "messageId": f"m-{run}", "role": "assistant"}))
        deadline = time.monotonic() + 60  # a failing test must not leave it running for ever
        while time.monotonic() < deadline:
            if not write(handler, frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": f"m-{run}", "delta": "."})):
                break  # Countersign closed the connection
            time.sleep(PACE)  # the hostile peer's pace: part of the scenario
        with self.lock:
            self.open[run] = 0
            self.closed_at[run] = time.monotonic()

    def streaming(self) -> int:
        with self.lock:
            return sum(self.open.values())


@pytest.fixture(scope="module")
def agent():
    endless = Endless().start()
    yield endless
    endless.stop()


def register(app, agent, names) -> None:
    with app.api() as api:
        for name, url in names.items():
            response = api.post("/api/agents/", json={"name": name, "url": url or f"{agent.url}/endless/{name}/"})
            assert response.status_code == 201, response.text


@pytest.fixture(scope="module")
def limited(tmp_path_factory, agent):
    """Runs may stream 3 s; agents that never stop sending."""
    app = ServedApp(tmp_path_factory.mktemp("too-long"), self_approving=True, COUNTERSIGN_IDLE_TIMEOUT="1.5",
                    COUNTERSIGN_MAX_RUN_SECONDS="3", COUNTERSIGN_POLL_INTERVAL="0.2").start()
    register(app, agent, {"endless": None})
    yield app
    app.stop()


@pytest.fixture(scope="module")
def hub(tmp_path_factory, agent):
    """Small stream limits; runs may go on long enough to be stopped by hand."""
    app = ServedApp(tmp_path_factory.mktemp("limits"), self_approving=True, COUNTERSIGN_IDLE_TIMEOUT="1.5",
                    COUNTERSIGN_MAX_RUN_SECONDS="60", COUNTERSIGN_POLL_INTERVAL="0.2",
                    COUNTERSIGN_MAX_STREAMS=str(MAX_STREAMS), COUNTERSIGN_MAX_AGENT_STREAMS=str(AGENT_STREAMS),
                    COUNTERSIGN_RETRY_BASE="30").start()
    register(app, agent, {"endless-a": None, "endless-b": None, "endless-c": None,
                          "ask": f"{agent.url}/ask/", "gone": "http://127.0.0.1:9/"})
    yield app
    app.stop()


@pytest.fixture
def api(hub):
    with hub.api() as client:
        yield client
        # Every endless run is stopped, so the next test (and the server's shutdown) start clean.
        # Read from the database, not `manage.py runs list` (a Django start per poll); the test of
        # that command is below.
        for run_id, thread in active_runs(hub):
            client.post(f"/api/runs/{run_id}/cancel/", params={"thread": thread})
        wait_for(lambda: not active_runs(hub), timeout=10)


def active_runs(app) -> list[tuple[str, str]]:
    return app.query("SELECT r.run_id, t.thread_id FROM interrupts_run r JOIN interrupts_thread t ON t.id = r.thread_id"
                     " WHERE r.status IN ('queued', 'streaming')")


def streaming(api, run_id: str) -> dict:
    """Wait until the run streams and has brought a few events; the run."""
    run = wait_for(lambda: (r := run_of(api, run_id))["status"] == "streaming" and r, timeout=10)
    wait_for(lambda: len([e for e in events(api, run["thread"]) if e["run"] == run_id]) >= 3, timeout=10)
    return run


def last_events_of(api, run: dict) -> list[dict]:
    return [e for e in events(api, run["thread"]) if e["run"] == run["run_id"]]


def let_go(app: ServedApp, run_id: str) -> bool:
    """Whether the serving process logged that its streamer of ``run_id`` stopped (it reads nothing more)."""
    return any(f"run {run_id}: " in line and "its stream" in line
               for line in app.log.read_text(errors="replace").splitlines())


def stopped_by_operator(app, api, agent, run: dict) -> None:
    """The run ended with the operator's RUN_ERROR, nothing came after it, and the agent was hung up on."""
    done = finished_run(api, run["run_id"], run["thread"])
    assert (done["status"], done["error_code"]) == ("failed", "CANCELLED_BY_OPERATOR"), done
    wait_for(lambda: agent.open.get(run["run_id"]) == 0, timeout=15)
    # The agent kept sending until it was hung up on: once its streamer let go, nothing of it may be recorded.
    wait_for(lambda: let_go(app, run["run_id"]), timeout=15)
    logged = last_events_of(api, run)
    assert logged[-1]["type"] == "RUN_ERROR" and not logged[-1]["from_agent"]
    assert logged[-1]["payload"]["code"] == "CANCELLED_BY_OPERATOR"
    assert [e["type"] for e in logged].count("RUN_ERROR") == 1


class GatewayStream:
    """A client streaming one run through ``POST /agui/<agent>/`` in a thread of its own."""

    def __init__(self, app, agent: str, thread: str) -> None:
        self.run_id = f"run-{thread}"
        self.events: list[dict] = []
        self.ended = threading.Event()
        self.failure: BaseException | None = None  # why the client stopped reading, if not the stream's end
        body = {"threadId": thread, "runId": self.run_id, "messages": [], "state": {}, "tools": [], "context": [],
                "forwardedProps": {}}
        self.thread = threading.Thread(target=self._read, args=(app, agent, body), daemon=True)
        self.thread.start()

    def _read(self, app, agent, body) -> None:
        try:
            with httpx.stream("POST", f"{app.url}/agui/{agent}/", json=body, timeout=30,
                              headers={"Authorization": f"Token {app.token}"}) as response:
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(json.loads(line[6:]))
        except Exception as problem:  # told apart from a clean end in the assertions
            self.failure = problem
        finally:
            self.ended.set()

    def started(self) -> bool:
        return any(e["type"] == "TEXT_MESSAGE_CONTENT" for e in self.events)

    def refused(self, timeout: float = 10) -> str:
        assert self.ended.wait(timeout)
        assert [e["type"] for e in self.events] == ["RUN_STARTED", "RUN_ERROR"], self.events
        return self.events[-1]["code"]


def test_an_agent_that_never_stops_sending_is_ended_after_the_maximum_run_time(limited, agent):
    with limited.api() as api:
        run = start(api, "endless")
        began = time.monotonic()
        done = finished_run(api, run["run_id"], run["thread"])
        assert (done["status"], done["error_code"]) == ("failed", "RUN_TOO_LONG"), done
        assert 2.5 < time.monotonic() - began < 8
        assert "COUNTERSIGN_MAX_RUN_SECONDS" in done["error_message"]
        # It sent far more often than the idle timeout (1.5 s) for all that time.
        assert len([e for e in last_events_of(api, run) if e["type"] == "TEXT_MESSAGE_CONTENT"]) > 8
        wait_for(lambda: agent.open.get(run["run_id"]) == 0, timeout=15)
        # The thread takes a new run.
        again = api.post(f"/api/threads/{run['thread']}/runs/", json={"message": "again"})
        assert again.status_code == 201, again.text
        assert finished_run(api, again.json()["run_id"], run["thread"])["error_code"] == "RUN_TOO_LONG"


def non_staff_token(app) -> str:
    code = ("from django.contrib.auth import get_user_model; "
            "get_user_model().objects.create_user('bob', password='bob-pass-1234', first_name='Bob')")
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=app.env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    done = manage("tokens", "create", "bob", env=app.env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_staff_stop_an_endless_run_over_the_api(hub, api, agent):
    run = streaming(api, start(api, "endless-a")["run_id"])

    with httpx.Client(base_url=hub.url, headers={"Authorization": f"Token {non_staff_token(hub)}"}) as bob:
        refused = bob.post(f"/api/runs/{run['run_id']}/cancel/")
    assert refused.status_code == 403
    assert refused.json()["code"] == "STAFF_ONLY" and refused.json()["detail"]
    assert run_of(api, run["run_id"])["status"] == "streaming"

    asked = time.monotonic()
    response = api.post(f"/api/runs/{run['run_id']}/cancel/")
    assert response.status_code == 202, response.text
    assert response.json()["error_code"] == "CANCELLED_BY_OPERATOR"
    assert "reviewer" in response.json()["error_message"]
    stopped_by_operator(hub, api, agent, run)
    assert agent.closed_at[run["run_id"]] - asked < 3

    again = api.post(f"/api/runs/{run['run_id']}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "NOT_RUNNING"
    # The thread takes input again.
    response = api.post(f"/api/threads/{run['thread']}/runs/", json={"message": "next"})
    assert response.status_code == 201, response.text
    streaming(api, response.json()["run_id"])


def test_a_run_waiting_for_an_unreachable_agent_can_be_stopped(api):
    run = start(api, "gone")
    waiting = wait_for(lambda: (r := run_of(api, run["run_id"]))["attempts"] >= 1 and r, timeout=10)
    assert waiting["status"] == "queued"
    response = api.post(f"/api/runs/{run['run_id']}/cancel/")
    assert response.status_code == 202, response.text
    done = run_of(api, run["run_id"])
    assert (done["status"], done["error_code"], done["delivery"]) == ("failed", "CANCELLED_BY_OPERATOR", "")
    assert last_events_of(api, run)[-1]["payload"]["code"] == "CANCELLED_BY_OPERATOR"


def test_the_runs_command_lists_active_runs_and_stops_one(hub, api, agent):
    run = streaming(api, start(api, "endless-b")["run_id"])
    listed = manage("runs", "list", "--active", env=hub.env)
    assert listed.returncode == 0, listed.stderr
    assert run["run_id"] in listed.stdout and "streaming" in listed.stdout

    # Another process than the streaming one: the stream stops at its next batch.
    done = manage("runs", "cancel", run["run_id"], "--thread", run["thread"], env=hub.env)
    assert done.returncode == 0, done.stderr
    assert f"Stopped run {run['run_id']}" in done.stdout
    stopped_by_operator(hub, api, agent, run)
    assert "manage.py runs cancel" in run_of(api, run["run_id"])["error_message"]
    again = manage("runs", "cancel", run["run_id"], env=hub.env)
    assert again.returncode != 0 and "already ended" in again.stderr


def test_gateway_streams_count_against_the_process_and_the_agent(hub, api, agent):
    clients = [GatewayStream(hub, "endless-a", f"gw-a-{n}") for n in range(AGENT_STREAMS)]
    wait_for(lambda: all(c.started() for c in clients), timeout=10)
    # The agent at its limit is refused, though the process has room; the agent is not called.
    more = GatewayStream(hub, "endless-a", "gw-a-more")
    assert more.refused() == "AGENT_AT_CAPACITY"
    assert more.run_id not in agent.open
    # A hub run of that agent waits too.
    held = start(api, "endless-a")

    # Two more of another agent: every slot new runs may use (the last one is a resume's).
    clients += [GatewayStream(hub, "endless-b", f"gw-b-{n}") for n in range(AGENT_STREAMS)]
    wait_for(lambda: all(c.started() for c in clients), timeout=10)
    full = GatewayStream(hub, "endless-c", "gw-c")
    assert full.refused() == "AT_CAPACITY"
    assert "COUNTERSIGN_MAX_STREAMS" in full.events[-1]["message"]
    assert full.run_id not in agent.open
    # A hub run of a third agent waits for a slot the gateway's streams hold.
    queued = start(api, "endless-c")
    assert run_of(api, queued["run_id"])["status"] == "queued"
    assert run_of(api, held["run_id"])["status"] == "queued"

    # Stopping a gateway run: its client gets the RUN_ERROR, then the end of the stream.
    stopped = clients.pop()
    freed = time.monotonic()
    response = api.post(f"/api/runs/{stopped.run_id}/cancel/")
    assert response.status_code == 202, response.text
    assert stopped.ended.wait(5) and stopped.failure is None, stopped.failure
    assert stopped.events[-1]["type"] == "RUN_ERROR" and stopped.events[-1]["code"] == "CANCELLED_BY_OPERATOR"
    # Its slot is free again: the queued hub run takes it, and had waited for it; endless-a is still at its limit.
    streaming(api, queued["run_id"])
    assert agent.opened_at[queued["run_id"]] > freed
    assert run_of(api, held["run_id"])["status"] == "queued"
    for client in clients:
        assert api.post(f"/api/runs/{client.run_id}/cancel/").status_code == 202
        assert client.ended.wait(5)
    streaming(api, held["run_id"])


def test_a_queued_resume_is_not_starved_by_endless_runs(hub, api, agent):
    asked = start(api, "ask")
    [interrupt] = wait_for(lambda: pending(api, asked["thread"]), timeout=10)
    # Endless runs of two agents take every slot new runs may use; another new run waits.
    endless = [start(api, name) for name in ("endless-a", "endless-b") for _ in range(AGENT_STREAMS)]
    for run in endless:
        streaming(api, run["run_id"])
    waiting = start(api, "endless-c")
    assert run_of(api, waiting["run_id"])["status"] == "queued"  # and still, below, once the resume went through

    decided = time.monotonic()
    response = api.post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": "approve"})
    assert response.status_code == 201, response.text
    wait_for(lambda: asked["thread"] in agent.resumes, timeout=15)
    assert agent.resumes[asked["thread"]] - decided < 5
    resume = api.get(f"/api/interrupts/{interrupt['id']}/").json()["resumed_by"]
    assert finished_run(api, resume, asked["thread"])["status"] == "succeeded"
    # All the while the endless runs stream on, and the new run still waits.
    assert {run_of(api, r["run_id"])["status"] for r in endless} == {"streaming"}
    assert run_of(api, waiting["run_id"])["status"] == "queued"


def test_the_thread_page_has_a_stop_button_for_staff(hub, api, agent):
    import re

    run = streaming(api, start(api, "endless-c")["run_id"])
    with httpx.Client(base_url=hub.url, timeout=30) as browser:
        page = browser.get("/accounts/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        logged = browser.post("/accounts/login/", headers={"Referer": f"{hub.url}/accounts/login/"},
                              data={"username": "reviewer", "password": "countersign", "csrfmiddlewaretoken": csrf})
        assert logged.status_code == 302, logged.text
        page = browser.get(f"/threads/{run['thread']}/").text
        action = re.search(r'<form method="post" action="([^"]+)" class="inline" data-testid="stop-run">', page).group(
            1
        )
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page[page.index(action):]).group(1)
        stopped = browser.post(action, data={"csrfmiddlewaretoken": csrf},
                               headers={"Referer": f"{hub.url}/threads/{run['thread']}/"})
        assert stopped.status_code == 302, stopped.text
        stopped_by_operator(hub, api, agent, run)
        assert 'data-testid="stop-run"' not in browser.get(f"/threads/{run['thread']}/").text
