"""An agent that is down when a resume is due: the resume waits, is retried with
backoff, is shown as "resume pending — agent unreachable, attempt N" with a
Retry-now action, and reaches the agent exactly once when it is back.

The agent is tests/e2e/scripted_agent.py as a process of its own, killed with
SIGKILL and started again on the same port; it writes every call it gets to a
file, so the count survives its death.
"""

import time
from datetime import datetime

import pytest

from ..agui import answers
from ..servers import ServedApp, free_port
from .conftest import events, logged_in, pending, run_of, start, wait_for
from .scripted_agent import AgentProcess

BASE = 2.0  # seconds before the first retry; each later one waits twice as long


@pytest.fixture(scope="module")
def patient(tmp_path_factory):
    app = ServedApp(tmp_path_factory.mktemp("retry"), self_approving=True, COUNTERSIGN_POLL_INTERVAL="0.2",
                    COUNTERSIGN_RETRY_BASE=str(BASE), COUNTERSIGN_RETRY_MAX_DELAY="600").start()
    yield app
    app.stop()


@pytest.fixture
def agent(tmp_path):
    process = AgentProcess(free_port(), tmp_path / "calls.jsonl").start()
    yield process
    if process.process.poll() is None:
        process.kill()


def when(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def test_a_resume_waits_for_an_unreachable_agent_and_reaches_it_once(patient, agent):
    with patient.api() as api:
        response = api.post("/api/agents/", json={"name": f"flaky-{agent.port}",
                                                  "url": f"http://127.0.0.1:{agent.port}/approve/"})
        assert response.status_code == 201, response.text
        thread = start(api, f"flaky-{agent.port}")["thread"]
        interrupt = wait_for(lambda: pending(api, thread))[0]

        agent.kill()
        response = api.post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": "approve"})
        assert response.status_code == 201, response.text
        resume = api.get(f"/api/interrupts/{interrupt['id']}/").json()["resumed_by"]
        assert resume

        # First try fails at once; the run is queued again, not failed.
        first = wait_for(lambda: (r := run_of(api, resume))["attempts"] == 1 and r)
        assert first["status"] == "queued"
        assert first["delivery"] == "resume pending — agent unreachable, attempt 1"
        assert first["last_error"].startswith("CONNECT_ERROR: Could not connect")
        failed_at = time.time()
        # Backoff: the second try comes by itself, about BASE seconds later...
        second = wait_for(lambda: (r := run_of(api, resume))["attempts"] == 2 and r, timeout=BASE + 10)
        assert time.time() - failed_at >= BASE * 0.7
        # ...and the third is due twice as long after it.
        notes = [e["payload"]["value"] for e in events(api, thread)
                 if e["type"] == "CUSTOM" and e["payload"]["name"] == "countersign.delivery_failed"]
        assert [n["attempt"] for n in notes] == [1, 2]
        assert second["retry_at"] and when(notes[1]["retryAt"]) - when(notes[0]["retryAt"]) >= BASE

        # The inbox shows it, with a Retry-now button.
        browser = logged_in(patient)
        try:
            page = browser.get("/inbox/").text
            assert "Resume pending — agent unreachable, attempt 2" in page
            assert f'/runs/{first["id"]}/retry/' in page and "Retry now" in page
            thread_page = browser.get(f"/threads/{thread}/").text
            assert "attempt 1 to reach the agent failed" in thread_page
        finally:
            browser.close()

        # Retry now: a third try at once, long before its backoff is due.
        asked = time.time()
        response = api.post(f"/api/runs/{resume}/retry/")
        assert response.status_code == 202, response.text
        third = wait_for(lambda: (r := run_of(api, resume))["attempts"] == 3 and r, timeout=BASE * 2)
        assert time.time() - asked < BASE * 2
        assert when(third["retry_at"]) - time.time() > BASE  # the next try waits 4 × BASE

        # The agent comes back: the next scheduled try delivers the resume, once.
        assert agent.calls() and all("resume" not in c["body"] for c in agent.calls())
        agent.start()
        done = wait_for(lambda: (r := run_of(api, resume))["status"] not in ("queued", "streaming") and r,
                        timeout=BASE * 4 + 10)
        assert done["status"] == "succeeded", done
        assert done["delivery"] == "" and done["attempts"] == 3
        resumes = [c["body"] for c in agent.calls() if c["body"].get("resume")]
        assert len(resumes) == 1
        assert resumes[0]["runId"] == resume
        assert answers(resumes[0]["resume"]) == [
            {"interruptId": "int-1", "status": "resolved", "payload": {"approved": True}}
        ]

        # Nothing is waiting any more: Retry-now is refused, with a code.
        response = api.post(f"/api/runs/{resume}/retry/")
        assert response.status_code == 409
        assert response.json()["code"] == "NOT_WAITING"
        log = [e for e in events(api, thread) if e["run"] == resume]
        kinds = [e["type"] if e["type"] != "CUSTOM" else e["payload"]["name"] for e in log]
        assert kinds[:4] == ["countersign.delivery_failed", "countersign.delivery_failed",
                             "countersign.retry_requested", "countersign.delivery_failed"]
        assert kinds[4] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
