"""A Redis restart under open pages: the next WebSocket connect works or says "try again later" (4013), never 500.

A served app on a redis-server of the test's own (tests/e2e/private_servers.py),
restarted while the app runs; Redis is the scale-out's channel layer, so the
test runs in CI's PostgreSQL + Redis pass (``in_pass``), on that pass's database.
"""

from __future__ import annotations

import json

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from ..servers import ServedApp
from .conftest import in_pass, pending, session_cookie, start, wait_for

# WebSocket's 1013 ("try again later") in the application's range: daphne cannot send 1013 itself.
TRY_AGAIN_LATER = 4013


@pytest.fixture
def app(tmp_path, private_redis):
    served = ServedApp(tmp_path, self_approving=True, REDIS_URL=private_redis.url,
                       COUNTERSIGN_POLL_INTERVAL="0.2").start()
    yield served
    served.stop()


def opened(app, path: str, session: str, first: str):
    """A socket on ``path`` and its first message's type; or None when it was closed 4013, "try again later".

    A handshake answered 500 (or any status) raises InvalidStatus, and any other close fails the test.
    """
    ws = connect(f"ws://127.0.0.1:{app.port}{path}", origin=app.url, proxy=None, open_timeout=10,
                 additional_headers={"Cookie": f"sessionid={session}"})
    try:
        message = json.loads(ws.recv(timeout=10))
    except ConnectionClosed as closed:
        ws.close()
        assert closed.rcvd is not None and closed.rcvd.code == TRY_AGAIN_LATER, closed
        return None
    assert message["type"] == first, message
    return ws


@in_pass("postgresql")
def test_the_first_socket_after_a_redis_restart_works_or_is_told_to_try_again_and_later_ones_work(app, private_redis):
    session = session_cookie(app)
    with app.api() as api:
        thread = start(api, "janitor", "tidy")["thread"]
        [asked] = wait_for(lambda: pending(api, thread), timeout=30)
        doors = [(f"/ws/threads/{thread}/", "hello"), ("/ws/inbox/", "pending")]
        for path, first in doors:
            opened(app, path, session, first).close()

        private_redis.stop()
        private_redis.start()  # the same port: the app's connections to the old one are dead

        outcomes = []
        for path, first in doors:
            try:
                ws = opened(app, path, session, first)
            except InvalidStatus as refused:  # the handshake itself was answered with an HTTP error
                pytest.fail(f"{path} after the restart: HTTP {refused.response.status_code}")
            outcomes.append("worked" if ws else "4013")
            if ws:
                ws.close()
        # Later connects work, unaided; and the thread's socket hears its thread again.
        attempts = {"count": 0}

        def thread_socket():
            attempts["count"] += 1
            return opened(app, f"/ws/threads/{thread}/", session, "hello")

        ws = wait_for(thread_socket, timeout=20, interval=0.2)
        try:
            decided = api.post(f"/api/interrupts/{asked['id']}/decide/", json={"action": "approve"})
            assert decided.status_code == 201, decided.text
            message = json.loads(ws.recv(timeout=15))
            assert message["type"] == "event", message
        finally:
            ws.close()
        inbox = wait_for(lambda: opened(app, "/ws/inbox/", session, "pending"), timeout=20, interval=0.2)
        try:
            # The inbox hears a change made after the restart: a new interrupt to decide.
            second = start(api, "janitor", "tidy")["thread"]
            wait_for(lambda: pending(api, second), timeout=30)
            heard = []
            while not any(m["type"] == "changed" and m.get("reason") == "raised" for m in heard):
                heard.append(json.loads(inbox.recv(timeout=15)))  # a silent socket times out: fails
                assert len(heard) < 20, heard
        finally:
            inbox.close()
    print(f"\nRedis restart: first connects {outcomes}; the thread socket worked after {attempts['count']} "
          "attempt(s); 0 x 500")
