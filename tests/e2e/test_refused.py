"""An answer the agent refuses is never lost: a failed resume is shown, and can be sent again, reopened or closed.

The agent is tests/e2e/scripted_agent.py: each ``refuse-*`` path raises one
approval, refuses the first resume of each thread its own way (RUN_ERROR
after or before RUN_STARTED, HTTP 500, a broken stream) and takes any later
one. The hub is a real daphne serving the whole app.
"""

import pytest

from ..agui import answers, resume_body
from .conftest import events, finished_run, logged_in, new_input, pending, run_of, start, wait_for

REFUSALS = {
    # path: (the run's error_code, what the refusal says, the lifecycle fault kept beside it)
    "refuse-error": ("STALE_APPROVAL", "The approval came too late", ""),
    # A stream opening with RUN_ERROR is the agent's own ending under 1.0 (C1, C8): no fault beside it.
    "refuse-early": ("unknown-interrupt", "No pending interrupt int-1", ""),
    "refuse-http": ("HTTP_ERROR", "HTTP 500: approval store unavailable", ""),
    "refuse-fault": ("MALFORMED_EVENT", "invalid event", ""),
}


def approved_and_refused(api, path):
    """A thread of agent ``x-<path>`` whose approval the agent refused: (thread, interrupt, refused run)."""
    run = start(api, f"x-{path}")
    assert finished_run(api, run["run_id"])["status"] == "interrupted"
    thread = run["thread"]
    [asked] = wait_for(lambda: pending(api, thread))
    response = api.post(f"/api/interrupts/{asked['id']}/decide/", json={"action": "approve", "comment": "ok"})
    assert response.status_code == 201, response.text
    resumed = wait_for(lambda: (d := api.get(f"/api/interrupts/{asked['id']}/").json())["resumed_by"] and d)
    refused = finished_run(api, resumed["resumed_by"], thread)
    return thread, asked, refused


def resumes_sent(scripted, thread):
    return [body for _path, body in list(scripted.bodies) if body.get("threadId") == thread and body.get("resume")]


@pytest.mark.parametrize("path", sorted(REFUSALS))
def test_a_refused_answer_is_shown_with_the_agent_s_code_and_holds_the_thread(api, hub, scripted, path):
    code, words, fault = REFUSALS[path]
    thread, asked, refused = approved_and_refused(api, path)
    assert refused["status"] == "failed" and refused["refused"] is True
    assert refused["error_code"] == code
    assert refused["refusal"].startswith(f"The agent refused the answer: {code}") and words in refused["refusal"]
    assert refused["fault"].startswith(fault) if fault else refused["fault"] == ""
    # Nothing was dropped: the interrupt still says how it was answered, and new
    # input waits until someone deals with the refused answer.
    assert api.get(f"/api/interrupts/{asked['id']}/").json()["status"] == "resolved"
    held = api.post(f"/api/threads/{thread}/runs/", json={"message": "next"})
    assert held.status_code == 409 and held.json()["code"] == "ANSWER_REFUSED", held.text
    assert api.post(f"/api/runs/{refused['run_id']}/retry/").json()["code"] == "NOT_WAITING"
    browser = logged_in(hub)
    try:
        page = browser.get("/inbox/").text
        assert f'data-run="{refused["run_id"]}"' in page and f"The agent refused the answer: {code}" in page
        assert f'data-run="{refused["run_id"]}"' in browser.get(f"/threads/{thread}/").text
    finally:
        browser.close()


def test_resend_sends_the_same_answers_again_once(api, scripted):
    thread, _asked, refused = approved_and_refused(api, "refuse-error")
    response = api.post(f"/api/runs/{refused['run_id']}/resend/")
    assert response.status_code == 201, response.text
    again = response.json()
    assert again["parent"] == refused["parent"] and again["run_id"] != refused["run_id"]
    assert finished_run(api, again["run_id"], thread)["status"] == "succeeded"
    first, second = resumes_sent(scripted, thread)
    # The same answers, attestation included, to the same interrupted run.
    assert second["resume"] == first["resume"] and second["parentRunId"] == first["parentRunId"]
    assert answers(second["resume"]) == [{"interruptId": "int-1", "status": "resolved", "payload": {"approved": True}}]
    settled = run_of(api, refused["run_id"], thread)
    assert (settled["refused"], settled["settlement"], settled["settled_by"]) == (False, "resent", "reviewer")
    twice = api.post(f"/api/runs/{refused['run_id']}/resend/")
    assert twice.status_code == 409 and twice.json()["code"] == "ALREADY_SETTLED"
    assert len(resumes_sent(scripted, thread)) == 2


def test_reopen_returns_the_batch_to_pending_and_a_new_decision_makes_a_new_resume(api, scripted):
    thread, asked, refused = approved_and_refused(api, "refuse-early")
    response = api.post(f"/api/runs/{refused['run_id']}/reopen/")
    assert response.status_code == 200 and response.json()["settlement"] == "reopened", response.text
    detail = api.get(f"/api/interrupts/{asked['id']}/").json()
    assert detail["status"] == "pending" and detail["resumed_by"] is None
    # The refused answer is kept, superseded, in the interrupt's history and the audit trail.
    [old] = detail["decisions"]
    assert old["comment"] == "ok" and old["superseded_at"] is not None
    response = api.post(f"/api/interrupts/{asked['id']}/decide/", json={"action": "approve", "comment": "again"})
    assert response.status_code == 201, response.text
    resumed = wait_for(lambda: (d := api.get(f"/api/interrupts/{asked['id']}/").json())["resumed_by"] and d)
    assert resumed["resumed_by"] != refused["run_id"]
    assert finished_run(api, resumed["resumed_by"], thread)["status"] == "succeeded"
    first, second = resumes_sent(scripted, thread)
    assert answers(second["resume"]) == answers(first["resume"])
    assert [d["comment"] for d in second["resume"][0]["metadata"]["countersign"]["decisions"]] == ["again"]
    kinds = [e["payload"].get("name") for e in events(api, thread) if e["type"] == "CUSTOM"]
    assert "countersign.refused_answer_settled" in kinds


def test_close_ends_the_batch_cancelled_and_the_thread_takes_new_input(api, scripted):
    thread, asked, refused = approved_and_refused(api, "refuse-http")
    response = api.post(f"/api/runs/{refused['run_id']}/close/")
    assert response.status_code == 200 and response.json()["settlement"] == "closed", response.text
    closed = api.get(f"/api/interrupts/{asked['id']}/").json()
    assert closed["status"] == "cancelled" and "after the agent refused the answer" in closed["closed_reason"]
    started = api.post(f"/api/threads/{thread}/runs/", json={"message": "next"})
    assert started.status_code == 201, started.text
    assert len(resumes_sent(scripted, thread)) == 1
    again = api.post(f"/api/runs/{refused['run_id']}/reopen/")
    assert again.status_code == 409 and again.json()["code"] == "ALREADY_SETTLED"


def test_only_a_failed_resume_can_be_settled(api):
    run = start(api, "x-agent-error")
    failed = finished_run(api, run["run_id"])
    assert failed["status"] == "failed" and failed["refused"] is False and failed["refusal"] == ""
    refused = api.post(f"/api/runs/{run['run_id']}/close/")
    assert refused.status_code == 409 and refused.json()["code"] == "NOT_REFUSED"


# --- through the gateway: an AG-UI client's resume the agent refuses ------------------------------------


APPROVE = [{"interruptId": "int-1", "status": "resolved", "payload": {"approved": True}}]


@pytest.mark.parametrize("path", ["refuse-error", "refuse-early"])
async def test_a_client_s_resume_the_agent_refuses_can_be_answered_again_through_the_gateway(gateway, api, path):
    thread = f"gw-{path}"
    first = await gateway(f"x-{path}", new_input(thread, "r1"))
    refused = await gateway(f"x-{path}", resume_body(first, thread, "r2", APPROVE))
    # The client reads the agent's own code, even for an error sent before RUN_STARTED.
    assert refused.last["type"] == "RUN_ERROR" and refused.last["code"] == REFUSALS[path][0]
    assert run_of(api, "r2", thread)["refused"] is True
    # New input waits; the client is told why, as a RUN_ERROR with a code.
    held = await gateway(f"x-{path}", new_input(thread, "r3"))
    assert held.types == ["RUN_STARTED", "RUN_ERROR"] and held.last["code"] == "ANSWER_REFUSED"
    assert api.post("/api/runs/r2/reopen/", params={"thread": thread}).status_code == 200
    again = await gateway(f"x-{path}", resume_body(first, thread, "r4", APPROVE))
    assert again.last["type"] == "RUN_FINISHED" and (again.last.get("outcome") or {}).get("type") != "interrupt"
    assert run_of(api, "r4", thread)["status"] == "succeeded"


async def test_after_closing_a_refused_answer_the_client_starts_afresh_through_the_gateway(gateway, api):
    thread = "gw-refuse-close"
    first = await gateway("x-refuse-http", new_input(thread, "r1"))
    refused = await gateway("x-refuse-http", resume_body(first, thread, "r2", APPROVE))
    assert refused.last["type"] == "RUN_ERROR" and refused.last["code"] == "HTTP_ERROR"
    assert api.post("/api/runs/r2/close/", params={"thread": thread}).status_code == 200
    # The same resume again replays the refused run, as the client saw it: without
    # Countersign's note of the settlement, which is the log's, not the run's.
    replayed = await gateway("x-refuse-http", resume_body(first, thread, "r2-again", APPROVE))
    assert replayed.types == refused.types
    fresh = await gateway("x-refuse-http", new_input(thread, "r3"))
    assert fresh.last["outcome"]["type"] == "interrupt"
