"""Sessions end everywhere, over real servers: logging out closes that session's sockets within a second.

One `manage.py serve` on this run's back end (the in-memory channel layer,
or Redis and PostgreSQL in CI's second pass), then two processes sharing
Redis where the sockets are open on one and the logout reaches the other.
Right after the logout the reviewer's pending interrupt is decided (by API
token, which the logout does not touch): its resumed run's events and the
inbox's change are broadcast while the closed sockets would still be
listening. A socket of another live session hears them, proving they went
out; the logged-out sockets hear none of it, and close with "log in first".
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from ..servers import ROOT, ServedApp, cluster, stop_all
from .conftest import decide, finished_run, pending, resumed, start, wait_for

LOG_IN_FIRST = 4401


@pytest.fixture(scope="module")
def agent_url(scripted):
    return f"{scripted.url}/approve/"


def _register(app, url: str) -> None:
    with app.api() as api:
        response = api.post("/api/agents/", json={"name": "x-approve", "url": url})
        assert response.status_code == 201, response.text


@pytest.fixture(scope="module")
def single(tmp_path_factory, agent_url):
    """One process on this run's back end (REDIS_URL, DATABASE_URL when set; else in-memory and SQLite)."""
    app = ServedApp(tmp_path_factory.mktemp("sessions-one"), self_approving=True,
                    COUNTERSIGN_POLL_INTERVAL="0.2").start()
    try:
        _register(app, agent_url)
        yield [app, app]
    finally:
        app.stop()


@pytest.fixture(scope="module")
def pair(tmp_path_factory, agent_url, redis_url):
    """Two processes of one deployment sharing a database and Redis."""
    apps = cluster(tmp_path_factory.mktemp("sessions-two"), 2, self_approving=True, REDIS_URL=redis_url,
                   COUNTERSIGN_POLL_INTERVAL="0.2")
    try:
        _register(apps[0], agent_url)
        yield apps
    finally:
        stop_all(apps)


class Browser:
    """A logged-in browser of ``app``: its session cookie, and a logout as the page's button posts it."""

    def __init__(self, app, username: str = "reviewer", password: str = "countersign") -> None:
        self.client = httpx.Client(base_url=app.url, timeout=30)
        csrf = self.client.get("/accounts/login/").cookies["csrftoken"]
        response = self.client.post("/accounts/login/", headers={"Referer": f"{app.url}/"}, data={
            "username": username, "password": password, "csrfmiddlewaretoken": csrf})
        assert response.status_code == 302, response.text
        self.session = self.client.cookies["sessionid"]

    def log_out(self, app) -> None:
        """Log out through ``app`` (any process of the deployment)."""
        csrf = self.client.cookies["csrftoken"]
        response = self.client.post(f"{app.url}/accounts/logout/", data={"csrfmiddlewaretoken": csrf},
                                    headers={"Referer": f"{app.url}/"})
        assert response.status_code == 302, response.text

    def socket(self, app, path: str, stack: contextlib.ExitStack):
        ws = stack.enter_context(connect(f"ws://127.0.0.1:{app.port}{path}", origin=app.url, proxy=None,
                                         open_timeout=10, additional_headers={"Cookie": f"sessionid={self.session}"}))
        first = json.loads(ws.recv(timeout=10))
        assert first["type"] in ("pending", "hello"), first
        return ws


def closed_by(ws, deadline: float) -> list[dict]:
    """What ``ws`` heard before it closed with "log in first", which it must by ``deadline`` (monotonic)."""
    heard = []
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"still open past the deadline; heard {heard}"
        try:
            heard.append(json.loads(ws.recv(timeout=left)))
        except TimeoutError:
            raise AssertionError(f"still open past the deadline; heard {heard}") from None
        except ConnectionClosed as closed:
            assert closed.rcvd is not None and closed.rcvd.code == LOG_IN_FIRST, closed
            return heard


def content(heard: list[dict]) -> list[dict]:
    """Messages that tell of the change made after the logout: a thread's events, the inbox changing."""
    return [m for m in heard if m["type"] in ("event", "changed")]


def _paused_thread(app):
    with app.api() as api:
        run = start(api, "x-approve")
        assert finished_run(api, run["run_id"])["status"] == "interrupted"
        [asked] = wait_for(lambda: pending(api, run["thread"]))
    return run["thread"], asked


@pytest.mark.parametrize("processes", ["single", "pair"])
def test_logging_out_closes_that_sessions_sockets_within_a_second_on_every_process(processes, request):
    watcher_app, door = request.getfixturevalue(processes)  # sockets on the first, the logout through the second
    thread, asked = _paused_thread(watcher_app)
    leaving, staying = Browser(door), Browser(watcher_app)
    with contextlib.ExitStack() as stack:
        sockets = [leaving.socket(watcher_app, "/ws/inbox/", stack),
                   leaving.socket(watcher_app, f"/ws/threads/{thread}/", stack)]
        control = staying.socket(watcher_app, f"/ws/threads/{thread}/", stack)
        leaving.log_out(door)
        deadline = time.monotonic() + 1.0
        # Decided at once, beside the wait: the resumed run's events are broadcast while the sockets
        # might still listen.
        with ThreadPoolExecutor(1) as pool:
            deciding = pool.submit(_decide, door, asked)
            for ws in sockets:
                assert content(closed_by(ws, deadline)) == []
            deciding.result()
        # They went out: the colleague's session, still live, hears the resumed run.
        with watcher_app.api() as api:
            assert resumed(api, asked)["status"] == "succeeded"
        heard = []
        wait_for(lambda: heard.append(json.loads(control.recv(timeout=10)))
                 or heard[-1].get("event_type") == "RUN_FINISHED")
        assert content(heard)


def test_deactivating_a_user_from_another_process_closes_their_sockets(pair):
    # A process with no server at all (a shell, a script): the news still reaches the serving ones.
    app = pair[0]
    created = _shell(app, "from django.contrib.auth import get_user_model; "
                     "get_user_model().objects.create_user('leaver', password='a long passphrase here')")
    assert created.returncode == 0, created.stderr
    thread, _ = _paused_thread(app)
    browser = Browser(pair[1], "leaver", "a long passphrase here")
    with contextlib.ExitStack() as stack:
        sockets = [browser.socket(app, "/ws/inbox/", stack), browser.socket(pair[1], f"/ws/threads/{thread}/", stack)]
        shell = subprocess.Popen(
            [sys.executable, "manage.py", "shell", "-c", "from django.contrib.auth import get_user_model; "
             "import time; u = get_user_model().objects.get(username='leaver'); u.is_active = False; "
             "at = time.monotonic(); u.save(); print(f'deactivated at {at}', flush=True)"],
            cwd=ROOT, env=app.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Watched while the shell runs; its clock (CLOCK_MONOTONIC) is this process's.
        closed_at = []
        for ws in sockets:
            closed_by(ws, time.monotonic() + 60)
            closed_at.append(time.monotonic())
        out, err = shell.communicate(timeout=120)
        assert shell.returncode == 0, err
        deactivated = float(out.strip().rsplit(" ", 1)[1])
        assert max(closed_at) - deactivated < 1.0, (closed_at, deactivated)


def _decide(app, asked) -> None:
    with app.api() as api:
        decide(api, asked, action="approve")


def _shell(app, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=app.env,
                          capture_output=True, text=True, timeout=120, check=False)
