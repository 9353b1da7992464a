"""What is committed is never lost: queued resumes and half-streamed runs survive a crash.

Each test runs `manage.py serve` processes on one database (SQLite, or
PostgreSQL when DATABASE_URL names it), kills them (SIGKILL: no clean
shutdown, at a point COUNTERSIGN_CRASH_AT names) and starts new ones.
"""

import json
import os
import subprocess
import sys

import httpx
import pytest

from ..servers import ROOT, ServedApp
from .conftest import events, finished_run, pending, start, wait_for
from .counting_agent import CountingAgent


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


# --- The outbox's contract, at each point a process can die (README, "The outbox's contract") ---------------

@pytest.fixture(scope="module")
def counting():
    agent = CountingAgent().start()
    yield agent
    agent.stop()


#: (where the first process dies, which agent, how the resume ends):
#: "resent": never left, sent again and received once; "deduped": left, sent again,
#: the SDK answered without acting again; "person": left to an agent that does not
#: dedupe, WORKER_LOST for a person, received at most once; "ended": answered to the end.
CASES = [
    ("claimed", "plain", "resent"),
    ("sent", "dedupes", "resent"),
    ("sent", "plain", "person"),
    ("answered", "plain", "person"),
    ("answered", "dedupes", "deduped"),
    ("events:2", "dedupes", "deduped"),
    ("events:2", "plain", "person"),
    ("recorded", "plain", "ended"),
]


def no_500(*apps):
    for app in apps:
        text = app.log.read_text()
        assert '" 500 ' not in text and "Internal Server Error" not in text, text[-3000:]


QUICK = {"COUNTERSIGN_POLL_INTERVAL": "0.2", "COUNTERSIGN_LEASE_SECONDS": "1",
         "COUNTERSIGN_AFTER_TERMINAL_GRACE": "0.2"}


class Case:
    """A thread whose resume, sent to the agent at ``path``, was being sent when its process died at ``point``."""

    def __init__(self, n: int, counting, point: str, path: str, ending: str) -> None:
        self.n, self.counting, self.point, self.path, self.ending = n, counting, point, path, ending

    def __str__(self) -> str:
        return f"{self.point} with the {self.path} agent"

    def crash(self, app: ServedApp) -> None:
        """Raise an interrupt and answer it on ``app``, which dies sending the resume."""
        with app.api() as api:
            name = f"count-{self.n}-{self.path}"
            declared = self.counting.apps[self.path].agent.capabilities() if self.path == "dedupes" else {}
            response = api.post("/api/agents/", json={"name": name, "url": f"{self.counting.url}/{self.path}/",
                                                      "capabilities": declared})
            assert response.status_code == 201, response.text
            self.run = start(api, name)
            [self.asked] = wait_for(lambda: pending(api, self.run["thread"]))
            try:
                response = api.post(f"/api/interrupts/{self.asked['id']}/decide/",
                                    json={"action": "respond", "payload": {"approved": True}})
            except httpx.TransportError:
                # Committed, and the resume claimed and the process dead before the answer
                # went out: ``check`` finds the decision's resume, which is what counts.
                pass
            else:
                assert response.status_code == 201, response.text
        assert app.process.wait(timeout=20) == -9, f"{self}: the process did not die at the point"

    def check(self, app: ServedApp) -> None:
        """Once ``app``, a later process of the deployment, settled the resume: how, against what the agent got."""
        with app.api() as api:
            detail = api.get(f"/api/interrupts/{self.asked['id']}/").json()
            resume = finished_run(api, detail["resumed_by"])
            log = events(api, self.run["thread"])
        run_id = resume["run_id"]
        received = self.counting.received(run_id)
        acted = [answers for acted_run, answers in self.counting.acted if acted_run == run_id]
        # What reached the agent is what was acknowledged, under one runId.
        stored = app.query("SELECT input FROM interrupts_run WHERE run_id = %s", run_id)[0][0]
        stored = json.loads(stored) if isinstance(stored, str) else stored
        for body in received:
            assert body["runId"] == run_id
            assert [(e["interruptId"], e["status"], e.get("payload")) for e in body["resume"]] == [
                (self.asked["interrupt_id"], "resolved", {"approved": True})], self
            assert body["resume"] == stored["resume"], self
        notes = [e for e in log if e["payload"].get("name") == "countersign.sent_again"]
        if self.ending in ("resent", "deduped", "ended"):
            assert resume["status"] == "succeeded", (str(self), resume)
            assert len(acted) == 1, (str(self), acted)
            assert len(received) == (2 if self.ending == "deduped" else 1), (str(self), received)
            assert len(notes) == (0 if self.ending == "ended" else 1), (str(self), notes)
        else:
            assert (resume["status"], resume["error_code"]) == ("failed", "WORKER_LOST"), (str(self), resume)
            assert "may have acted" in resume["error_message"]
            assert len(received) <= 1 and len(acted) <= 1 and notes == [], (str(self), received, notes)


def test_an_acknowledged_resume_reaches_its_agent_once_wherever_the_process_dies(tmp_path, counting):
    """One deployment, one process per case: each dies at its point, and the next settles its resume.

    The crash hook spares a resume sent again (``crashpoints``), so the next
    process re-sends the last one's resume unharmed, and is checked before its
    own case starts: one start-up per case, not two.
    """
    apps: list[ServedApp] = []
    try:
        previous = None
        for n, (point, path, ending) in enumerate(CASES + [(None, None, None)]):
            app = ServedApp(tmp_path, f"serve-{n}", self_approving=True,
                            **({"COUNTERSIGN_CRASH_AT": point} if point else {}), **QUICK)
            if apps:
                app.token = apps[0].token
                app.launch().ready()
            else:
                app.start()
            apps.append(app)
            if previous is not None:
                previous.check(app)
            if point is not None:
                previous = Case(n, counting, point, path, ending)
                previous.crash(app)
        no_500(*apps)
    finally:
        for app in apps:
            app.stop()


ON_POSTGRES = os.environ.get("DATABASE_URL", "").startswith("postgres")


@pytest.mark.skipif(not ON_POSTGRES, reason="pg_terminate_backend is PostgreSQL's: the suite's PostgreSQL pass runs it")
def test_a_stream_whose_database_connections_are_killed_mid_stream_is_recorded_whole(tmp_path, counting):
    # A lease of the default's order: this is about writes on killed connections, and every kill
    # also fails a heartbeat; with QUICK's 1 s lease the run lapsed to recovery mid-retry.
    app = ServedApp(tmp_path, self_approving=True, **{**QUICK, "COUNTERSIGN_LEASE_SECONDS": "15"}).start()
    try:
        with app.api() as api:
            response = api.post("/api/agents/", json={"name": "count-slow", "url": f"{counting.url}/slow/"})
            assert response.status_code == 201, response.text
            run = start(api, "count-slow")
            [asked] = wait_for(lambda: pending(api, run["thread"]))
            response = api.post(f"/api/interrupts/{asked['id']}/decide/",
                                json={"action": "respond", "payload": {"approved": True}})
            assert response.status_code == 201, response.text
        # From here on, the database is read directly: only the stream's own writes meet the fault.
        resume = wait_for(lambda: app.query("SELECT id, run_id FROM interrupts_run WHERE parent_id = "
                                            "(SELECT id FROM interrupts_run WHERE run_id = %s)", run["run_id"]))
        [(pk, run_id)] = resume
        reports = ("SELECT payload FROM interrupts_event WHERE run_id = %s AND type = 'TEXT_MESSAGE_CONTENT' "
                   "ORDER BY seq")
        database = app.env["DATABASE_URL"].rsplit("/", 1)[1]
        seen = 0

        def seven_reports_each_met_by_a_kill() -> bool:
            # After each report recorded, every connection of the server is killed: its next
            # write meets one killed (the pool's idle ones die too) and must go on with a fresh one.
            nonlocal seen
            now = len(app.query(reports, pk))
            if seen < now < 7:
                seen = now
                killed = app.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                   "WHERE datname = %s AND pid <> pg_backend_pid()", database)
                assert killed and all(ok for (ok,) in killed)
            return now >= 7

        try:
            wait_for(seven_reports_each_met_by_a_kill, timeout=60, interval=0.02)
        except AssertionError as problem:
            if "timed out" not in str(problem):
                raise
            raise AssertionError(f"{seen} reports recorded; the run: " + repr(
                app.query("SELECT status, error_code FROM interrupts_run WHERE id = %s", pk))) from None
        status = wait_for(lambda: (s := app.query("SELECT status FROM interrupts_run WHERE id = %s", pk)[0][0])
                          not in ("queued", "streaming") and s)
        assert status == "succeeded"
        # Every event once, in order: a batch whose commit outlived its connection is not written twice.
        deltas = [json.loads(p)["delta"] if isinstance(p, str) else p["delta"] for (p,) in app.query(reports, pk)]
        assert deltas == [f"report {n}" for n in range(8)]
        assert app.query("SELECT count(*) FROM interrupts_event WHERE run_id = %s AND type = 'RUN_FINISHED'",
                         pk) == [(1,)]
        assert len(counting.received(run_id)) == 1
        # Whether a write met a killed connection (and logged its retry) depends on timing: the
        # pool checks a connection before lending it (settings), so most never do.
        no_500(app)
    finally:
        app.stop()
