"""The hub against an external AG-UI agent: a LangGraph graph behind ag-ui-langgraph.

The agent runs in its own process and venv (tests/external/langgraph_agent.py),
pure-Python nodes calling langgraph.types.interrupt, no LLM. It reports its
tool calls only in MESSAGES_SNAPSHOT, ends resumed runs with a legacy
RUN_FINISHED (no outcome), and enforces none of the contract itself: the hub
does, in front of it.
"""

import httpx
import pytest

from ..agui import post_run, resume_body
from .conftest import decide, events, paused, pending, resumed, start, state, wait_for

# What a framework sends, and how the hub reads it, is the same whatever stores it: `make test` runs
# it on SQLite; the PostgreSQL pass leaves it out (``backend_free``) and runs the hub's own end to end.
pytestmark = pytest.mark.backend_free


@pytest.fixture
def lg_api(api, langgraph):
    return api


def approval(api):
    return paused(api, "lg-approve")


def test_the_interrupt_and_its_proposal_are_recorded_from_the_snapshot(lg_api):
    run, asked = approval(lg_api)
    assert asked["reason"] == "tool_call"
    assert asked["tool_call_id"].startswith("call_refund_")
    assert len(asked["interrupt_id"]) == 32
    # Never streamed as TOOL_CALL_ARGS: reassembled from the MESSAGES_SNAPSHOT.
    assert asked["tool_name"] == "issue_refund"
    assert asked["proposed_args"] == {"order": "A-1001", "amount": 42, "currency": "EUR"}
    assert asked["supports_edits"] is True


def test_approve(lg_api):
    run, asked = approval(lg_api)
    decide(lg_api, asked, action="approve")
    done = resumed(lg_api, asked)
    assert done["status"] == "succeeded" and done["outcome"] is None  # legacy RUN_FINISHED
    assert state(lg_api, run["thread"])["decision"] == "approved"


def test_approve_with_edits(lg_api):
    run, asked = approval(lg_api)
    edited = {**asked["proposed_args"], "amount": 1}
    decision = decide(lg_api, asked, action="edit", edited_args=edited)
    assert decision["edited_args"] == edited
    resumed(lg_api, asked)
    assert state(lg_api, run["thread"])["decision"] == "approved"
    # The tool ran with the edited args: its result, in the conversation, says so.
    results = [m["content"] for m in lg_api.get(f"/api/threads/{run['thread']}/").json()["messages"]
               if m.get("role") == "tool"]
    assert results == ["refunded 1 EUR on A-1001"]


def test_reject(lg_api):
    run, asked = approval(lg_api)
    decide(lg_api, asked, action="reject")
    resumed(lg_api, asked)
    assert state(lg_api, run["thread"])["decision"] == "rejected"


def test_cancel(lg_api):
    run, asked = approval(lg_api)
    decide(lg_api, asked, action="cancel")
    resumed(lg_api, asked)
    assert state(lg_api, run["thread"])["decision"] == "cancelled"


def test_parallel_interrupts(lg_api):
    run = start(lg_api, "lg-parallel")
    both = wait_for(lambda: len(found := pending(lg_api, run["thread"])) == 2 and found)
    decide(lg_api, both[0], action="approve")
    assert pending(lg_api, run["thread"]) == [both[1]]
    decide(lg_api, both[1], action="cancel")
    done = resumed(lg_api, both[1])
    assert [e["status"] for e in done["input"]["resume"]] == ["resolved", "cancelled"]
    assert done["status"] == "succeeded"
    assert state(lg_api, run["thread"])["summary"].count("=") == 2


def test_a_form_with_expiry(lg_api):
    run = start(lg_api, "lg-form")
    [asked] = wait_for(lambda: pending(lg_api, run["thread"]))
    assert asked["reason"] == "input_required" and asked["expires_at"]
    bad = lg_api.post(f"/api/interrupts/{asked['id']}/decide/", json={"action": "respond", "payload": {"nope": 1}})
    assert bad.status_code == 400 and bad.json()["code"] == "INVALID_PAYLOAD"
    payload = _form_answer(asked["response_schema"])
    decide(lg_api, asked, action="respond", payload=payload)
    resumed(lg_api, asked)
    assert state(lg_api, run["thread"])["form"] == payload


def test_c19_an_expired_form_cannot_be_answered(lg_api):
    run = start(lg_api, "lg-form-short")
    [asked] = wait_for(lambda: pending(lg_api, run["thread"]))
    wait_for(lambda: lg_api.get(f"/api/interrupts/{asked['id']}/").json()["status"] == "expired")
    late = lg_api.post(f"/api/interrupts/{asked['id']}/decide/",
                       json={"action": "respond", "payload": _form_answer(asked["response_schema"])})
    assert late.status_code == 409 and late.json()["code"] == "EXPIRED"


def test_c20_c14_an_expired_form_is_still_answered_cancelled_and_the_graph_hears_it(lg_api):
    # 1.0: nobody answered in time, so the agent is told the interrupt was abandoned; the graph moves on.
    run = start(lg_api, "lg-form-short")
    [asked] = wait_for(lambda: pending(lg_api, run["thread"]))
    done = resumed(lg_api, asked)
    assert lg_api.get(f"/api/interrupts/{asked['id']}/").json()["status"] == "expired"
    [entry] = done["input"]["resume"]
    assert (entry["interruptId"], entry["status"]) == (asked["interrupt_id"], "cancelled")
    assert entry["metadata"]["countersign"]["expired"] is True
    assert done["status"] == "succeeded"
    assert state(lg_api, run["thread"])["decision"] == "cancelled"


def test_new_input_while_pending_is_refused_before_it_reaches_the_agent(lg_api):
    run, asked = approval(lg_api)
    refused = lg_api.post(f"/api/threads/{run['thread']}/runs/", json={"message": "and another"})
    assert refused.status_code == 409 and refused.json()["code"] == "PENDING_INTERRUPTS"
    assert [e["type"] for e in events(lg_api, run["thread"])].count("RUN_STARTED") == 1


async def test_through_the_gateway_a_replayed_resume_reaches_the_agent_once(hub, langgraph):
    headers = {"Authorization": f"Token {hub.token}"}
    url = f"{hub.url}/agui/lg-approve/"
    body = {
        "threadId": "lg-gw",
        "runId": "r1",
        "messages": [],
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    first = await post_run(url, body, headers)
    [asked] = first.interrupts
    resume = [{"interruptId": asked["id"], "status": "resolved", "payload": {"approved": True}}]
    second = await post_run(url, resume_body(first, "lg-gw", "r2", resume), headers)
    assert second.problems(severities=("error",)) == []
    again = await post_run(url, resume_body(first, "lg-gw", "r3", resume), headers)
    assert again.events == second.events  # recorded, not re-run
    with httpx.Client(base_url=hub.url, headers=headers) as api:
        started = [e["run"] for e in events(api, "lg-gw") if e["type"] == "RUN_STARTED"]
    assert started == ["r1", "r2"]


def _form_answer(schema: dict) -> dict:
    """A payload that fits the agent's form schema, built from the schema itself."""
    answer = {}
    for name, spec in schema["properties"].items():
        if "enum" in spec:
            answer[name] = spec["enum"][0]
        elif spec.get("type") == "integer":
            answer[name] = max(spec.get("minimum", 2026), 2026)
        elif spec.get("type") == "number":
            answer[name] = 1234.5
        elif spec.get("type") == "boolean":
            answer[name] = True
        else:
            answer[name] = "x"
    return answer


def test_after_an_expiry_new_input_cannot_answer_the_graph_through_forwarded_props(lg_api):
    # ag-ui-langgraph answers the interrupt its graph still holds with
    # forwardedProps.command.resume; after the interrupt expired here, new input
    # carrying one would submit a form nobody answered. Countersign refuses it.
    run = start(lg_api, "lg-form-short")
    thread = run["thread"]
    [asked] = wait_for(lambda: pending(lg_api, thread))
    wait_for(lambda: lg_api.get(f"/api/interrupts/{asked['id']}/").json()["status"] == "expired")
    sneaked = lg_api.post(f"/api/threads/{thread}/runs/", json={
        "message": "carry on", "forwarded_props": {"command": {"resume": _form_answer(asked["response_schema"])}}})
    assert sneaked.status_code == 400 and sneaked.json()["code"] == "RESERVED_FORWARDED_PROPS", sneaked.text
    assert state(lg_api, thread).get("decision") != "submitted"


async def test_a_client_cannot_skip_the_approval_node_by_naming_it(hub, langgraph, lg_api):
    # ag-ui-langgraph writes new input "as if node_name had run": naming the node
    # that asks for approval would go straight to the refund, nobody asked.
    headers = {"Authorization": f"Token {hub.token}"}
    body = {"threadId": "lg-skip", "runId": "r1", "messages": [], "tools": [], "context": [],
            "state": {"proposal": {"tool": "issue_refund", "args": {"order": "EVIL-1", "amount": 9999}},
                      "answer": {"approved": True}},
            "forwardedProps": {"nodeName": "ask_approval"}}
    streamed = await post_run(f"{hub.url}/agui/lg-approve/", body, headers)
    assert streamed.types == ["RUN_STARTED", "RUN_ERROR"] and streamed.last["code"] == "RESERVED_FORWARDED_PROPS"
    assert streamed.problems(severities=("error", "warning")) == []
    refused = lg_api.post("/api/threads/", json={"agent": "lg-approve", "forwarded_props": {"node_name": "execute"}})
    assert refused.status_code == 400 and refused.json()["code"] == "RESERVED_FORWARDED_PROPS", refused.text
