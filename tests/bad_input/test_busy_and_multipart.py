"""Refusals under /api/ are JSON {code, detail} even where Twisted or the database would answer otherwise.

Over a real `manage.py serve` (daphne on Twisted), on whichever database the
suite runs on (SQLite, or PostgreSQL with DATABASE_URL).
"""

import socket
import sqlite3
import time

import httpx
import pytest

from ..e2e.conftest import wait_for
from ..servers import ServedApp

BROKEN_MULTIPART = {"Content-Type": "multipart/form-data; boundary=xyz"}
BROKEN_BODY = b"--not-the-boundary\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    served = ServedApp(tmp_path_factory.mktemp("busy"), self_approving=True, COUNTERSIGN_DB_LOCK_TIMEOUT="1",
                       COUNTERSIGN_HTTP_IDLE_TIMEOUT="1").start()
    yield served
    served.stop()


@pytest.fixture
def api(app):
    with app.api() as client:
        yield client


def test_a_broken_multipart_body_to_the_api_gets_415_json(api):
    response = api.post("/api/threads/", content=BROKEN_BODY, headers=BROKEN_MULTIPART)
    assert response.status_code == 415, response.text
    assert response.json()["code"] == "UNSUPPORTED_MEDIA_TYPE" and response.json()["detail"]


def test_a_broken_multipart_body_to_a_page_gets_django_s_400(app):
    response = httpx.post(f"{app.url}/accounts/login/", content=BROKEN_BODY, headers=BROKEN_MULTIPART)
    # Django's answer (a page), not Twisted's bare "400 Bad Request" before Django saw anything.
    assert response.status_code in (400, 403), response.text
    assert "text/html" in response.headers["content-type"]


def test_a_well_formed_multipart_form_still_reaches_django(app):
    response = httpx.post(f"{app.url}/accounts/login/", files={"username": (None, "reviewer")})
    assert response.status_code == 403  # Django's CSRF refusal: it read the form
    assert "CSRF" in response.text


def _pending_interrupt(api) -> int:
    started = api.post("/api/threads/", json={"agent": "janitor", "message": "tidy"})
    assert started.status_code in (200, 201, 202), started.text
    thread = started.json()["thread"]

    def the_janitors_interrupt():
        return api.get("/api/interrupts/", params={"thread": thread, "status": "pending"}).json()["results"]

    return wait_for(the_janitors_interrupt, timeout=20)[0]["id"]


class WriteLock:
    """Another client holding the interrupts table (PostgreSQL) or the write lock (SQLite) until closed."""

    def __init__(self, database_url: str):
        if database_url.startswith("sqlite:///"):
            self.connection = sqlite3.connect(database_url.removeprefix("sqlite:///"), isolation_level=None)
            self.connection.execute("BEGIN IMMEDIATE")
        else:
            import psycopg

            self.connection = psycopg.connect(database_url)
            self.connection.execute("LOCK TABLE interrupts_interrupt IN ACCESS EXCLUSIVE MODE")

    def release(self):
        self.connection.rollback()
        self.connection.close()


def test_a_decision_on_a_busy_database_gets_503_busy_with_retry_after(app, api):
    interrupt = _pending_interrupt(api)
    lock = WriteLock(app.env["DATABASE_URL"])
    try:
        started = time.monotonic()
        response = api.post(f"/api/interrupts/{interrupt}/decide/", json={"action": "approve"})
        waited = time.monotonic() - started
    finally:
        lock.release()
    assert response.status_code == 503, response.text
    assert response.json()["code"] == "BUSY" and "Try again" in response.json()["detail"]
    assert response.headers["Retry-After"] == "5"
    assert waited < 10  # COUNTERSIGN_DB_LOCK_TIMEOUT=1, not 20 s or forever
    # Nothing was changed: the same decision goes through once the lock is gone.
    retried = api.post(f"/api/interrupts/{interrupt}/decide/", json={"action": "approve"})
    assert retried.status_code == 201, retried.text


def test_a_gateway_input_on_a_busy_database_gets_run_error_busy_and_nothing_is_recorded(app, api):
    body = {"threadId": "gw-busy", "runId": "gw-busy-1", "state": {}, "messages": [], "tools": [], "context": [],
            "forwardedProps": {}}
    lock = WriteLock(app.env["DATABASE_URL"])
    try:
        answered = api.post("/agui/janitor/", json=body)
    finally:
        lock.release()
    assert answered.status_code == 200 and answered.headers["content-type"].startswith("text/event-stream")
    events = [line.removeprefix("data: ") for line in answered.text.splitlines() if line.startswith("data: ")]
    assert [e.split('"type":')[1].split('"')[1] for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    assert '"code":"BUSY"' in events[1].replace(" ", "")
    assert api.get("/api/threads/gw-busy/").status_code == 404  # nothing was recorded
    again = api.post("/agui/janitor/", json=body)  # the same input goes through once the lock is gone
    assert "RUN_FINISHED" in again.text and "BUSY" not in again.text


def test_a_client_trickling_its_request_is_cut_off_after_the_idle_timeout(app, api):
    # Twisted's own default would hold the connection for 12 hours.
    with socket.create_connection(("127.0.0.1", app.port), timeout=10) as sock:
        sock.sendall(b"POST /api/threads/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{}")
        started = time.monotonic()
        while sock.recv(4096):  # whatever the server says before it hangs up
            pass
        assert time.monotonic() - started < 5  # COUNTERSIGN_HTTP_IDLE_TIMEOUT=1
    # A request that arrives whole is served as ever, however long it then takes.
    assert api.get("/api/threads/").status_code == 200
