"""What is committed is never lost: queued resumes and half-streamed runs survive a crash.

Each test runs `manage.py serve` processes on one SQLite database, kills them
(SIGKILL: no clean shutdown) and starts new ones.
"""

import subprocess
import sys

import pytest

from ..servers import ROOT, ServedApp
from .conftest import events, finished_run, pending, start, wait_for


@pytest.fixture
def workdir(tmp_path):
    return tmp_path


def serve(workdir, scripted=None, **env):
    return ServedApp(workdir, self_approving=True, COUNTERSIGN_POLL_INTERVAL="0.2", **env).start()


def crash(app):
    app.process.kill()
    app.process.wait()


def decide_offline(app, interrupt_pk):
    """Decide in a separate process with no server running: it commits and exits, nobody dispatches."""
    code = (
        "from django.contrib.auth import get_user_model; from interrupts.hub import decisions; "
        "from interrupts.models import Interrupt, Run; "
        f"i = Interrupt.objects.get(pk={interrupt_pk}); "
        "decisions.decide(i, get_user_model().objects.get(username='reviewer'), 'resolved', {'confirm': True}); "
        "print(Run.objects.filter(status='queued').count())"
    )
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=app.env,
                          capture_output=True, text=True, timeout=60, check=True)
    return int(done.stdout.split()[-1])


def test_a_resume_queued_when_the_process_died_is_sent_once_after_restart(workdir):
    first = serve(workdir)
    with first.api() as api:
        run = start(api, "janitor")
        [asked] = wait_for(lambda: pending(api, run["thread"]))
    crash(first)

    assert decide_offline(first, asked["id"]) == 1  # the resume is committed, queued, not sent

    second = serve(workdir)
    try:
        with second.api() as api:
            detail = wait_for(lambda: (d := api.get(f"/api/interrupts/{asked['id']}/").json())["resumed_by"] and d)
            resumed = finished_run(api, detail["resumed_by"])
            assert resumed["status"] == "succeeded"
    finally:
        second.stop()
    third = serve(workdir)  # a restart does not send it again
    try:
        with third.api() as api:
            log = events(api, run["thread"])
            assert [e["run"] for e in log if e["type"] == "RUN_STARTED"] == [run["run_id"], resumed["run_id"]]
            assert api.get(f"/api/threads/{run['thread']}/").json()["state"] == {"tasks": []}
    finally:
        third.stop()


def test_a_run_whose_process_died_mid_stream_is_reported_lost_not_resent(workdir, scripted):
    first = serve(workdir, COUNTERSIGN_LEASE_SECONDS="1", COUNTERSIGN_IDLE_TIMEOUT="30")
    with first.api() as api:
        assert api.post("/api/agents/", json={"name": "x-silent", "url": f"{scripted.url}/silent/"}).status_code == 201
        run = start(api, "x-silent")
        wait_for(lambda: events(api, run["thread"]))  # RUN_STARTED recorded: it is mid-stream
    crash(first)
    calls = scripted.calls[("silent", run["thread"])]

    second = serve(workdir, COUNTERSIGN_LEASE_SECONDS="1")
    try:
        with second.api() as api:
            lost = finished_run(api, run["run_id"])
            assert lost["status"] == "failed" and lost["error_code"] == "WORKER_LOST"
            assert events(api, run["thread"])[-1]["payload"]["code"] == "WORKER_LOST"
        assert scripted.calls[("silent", run["thread"])] == calls == 1
    finally:
        second.stop()


def test_a_run_that_had_finished_when_its_process_died_ends_as_it_said(workdir, scripted):
    # A long grace after RUN_FINISHED: the process dies while waiting for the close.
    first = serve(workdir, COUNTERSIGN_LEASE_SECONDS="1", COUNTERSIGN_AFTER_TERMINAL_GRACE="30")
    with first.api() as api:
        assert api.post("/api/agents/", json={"name": "x-linger", "url": f"{scripted.url}/linger/"}).status_code == 201
        run = start(api, "x-linger")
        wait_for(lambda: any(e["type"] == "RUN_FINISHED" for e in events(api, run["thread"])))
        assert api.get(f"/api/runs/{run['run_id']}/").json()["status"] == "streaming"
    crash(first)

    second = serve(workdir, COUNTERSIGN_LEASE_SECONDS="1")
    try:
        with second.api() as api:
            assert finished_run(api, run["run_id"])["status"] == "succeeded"
    finally:
        second.stop()
