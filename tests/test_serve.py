"""`manage.py serve` as `make serve` runs it: a real daphne process on a free port."""

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def manage(*args, env, **kwargs):
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120, check=False, **kwargs,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    db = tmp_path_factory.mktemp("serve") / "db.sqlite3"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{db}", "DEBUG": "true"}
    env.pop("REDIS_URL", None)
    for command in (["migrate", "--noinput"], ["demo_reviewer"]):
        done = manage(*command, env=env)
        assert done.returncode == 0, done.stderr
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        line = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if "listening on" in line or not line:
                break
        assert f"http://127.0.0.1:{port}/" in line, f"serve did not start: {line!r}"
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_serve_answers_with_the_login_page(server):
    response = httpx.get(f"{server}/accounts/login/")
    assert response.status_code == 200
    assert 'name="username"' in response.text


def test_serve_sends_anonymous_visitors_of_the_admin_to_log_in(server):
    response = httpx.get(f"{server}/admin/")
    assert response.status_code == 302
    assert "/admin/login/" in response.headers["location"]


def test_serve_serves_static_files(server):
    response = httpx.get(f"{server}/static/interrupts/countersign.css")
    assert response.status_code == 200
    assert "--accent" in response.text


def test_the_demo_reviewer_logs_in_and_reaches_the_admin(server):
    with httpx.Client(base_url=server, follow_redirects=False) as browser:
        page = browser.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        response = browser.post(
            "/accounts/login/",
            data={"username": "reviewer", "password": "countersign", "csrfmiddlewaretoken": token},
            headers={"Referer": f"{server}/accounts/login/"},
        )
        assert response.status_code == 302, response.text
        assert browser.get("/").status_code == 200
        admin = browser.get("/admin/")
        assert admin.status_code == 200
        assert "Countersign" in admin.text


def test_a_post_without_a_csrf_token_is_refused(server):
    response = httpx.post(f"{server}/accounts/login/", data={"username": "reviewer", "password": "countersign"})
    assert response.status_code == 403
