"""AG-UI 1.0's rules through the gateway, where Countersign is the producer toward a client: frontend tool
calls (C21-C23, P25-P28), unrecognised resume entries (P16, P17), the agent's version (P64, P66).
Every stream is checked by ag-ui-validate (the ``gateway`` fixture). Named after the checklist's rules."""

from ..agui import resume_body
from .conftest import finished_run, new_input, run_of


def _answered(first, thread: str, run: str, answer: bool) -> dict:
    messages = list(first.snapshot("MESSAGES_SNAPSHOT"))
    if answer:
        messages.append({"id": "t-front", "role": "tool", "toolCallId": "tc-front", "content": "5 May"})
    return new_input(thread, run=run, messages=messages)


async def test_c23_the_client_gets_the_pending_calls_and_must_answer_them_to_go_on(gateway, scripted, api):
    first = await gateway("x-frontend-tool", new_input("gw-front-1-0"))
    # The agent's events reach the client unchanged: its RUN_STARTED and its version (P66), its outcome (P28).
    assert first.events[0]["protocolVersion"] == "1.0"
    assert first.last["outcome"] == {"type": "success", "pendingToolCallIds": ["tc-front"]}
    assert finished_run(api, "r1", thread="gw-front-1-0")["status"] == "waiting_on_client"
    refused = await gateway("x-frontend-tool", _answered(first, "gw-front-1-0", "r2", answer=False))
    assert refused.types == ["RUN_STARTED", "RUN_ERROR"] and refused.last["code"] == "UNANSWERED_TOOL_CALLS"
    assert "tc-front" in refused.last["message"]
    assert scripted.calls[("frontend-tool", "gw-front-1-0")] == 1  # the agent never heard of it
    second = await gateway("x-frontend-tool", _answered(first, "gw-front-1-0", "r3", answer=True))
    assert second.said() == ["told 5 May"]  # the answer reached the agent, keyed by toolCallId
    assert finished_run(api, "r3", thread="gw-front-1-0")["status"] == "succeeded"


async def test_c21_a_call_left_without_result_or_field_is_pending_too(gateway, api):
    # LlamaIndex's frontend tools: no pendingToolCallIds, only a call with no result.
    first = await gateway("x-frontend-tool-silent", new_input("gw-front-silent"))
    assert "outcome" not in first.last
    run = finished_run(api, "r1", thread="gw-front-silent")
    assert run["status"] == "waiting_on_client" and run["waiting_on"].endswith("pick_date")
    refused = await gateway("x-frontend-tool-silent", _answered(first, "gw-front-silent", "r2", answer=False))
    assert refused.last["code"] == "UNANSWERED_TOOL_CALLS"


def _warnings(streamed) -> list[dict]:
    return [e["value"] for e in streamed.events if e["type"] == "CUSTOM" and e["name"] == "countersign:warning"]


async def test_p16_an_entry_naming_no_interrupt_is_left_out_and_the_client_warned(gateway, scripted):
    first = await gateway("x-approve", new_input("gw-p16"))
    resume = [{"interruptId": "int-1", "status": "resolved", "payload": {"approved": True}},
              {"interruptId": "int-stranger", "status": "cancelled"}]
    second = await gateway("x-approve", resume_body(first, "gw-p16", "r2", resume))
    assert second.types[0] == "RUN_STARTED" and second.types[1] == "CUSTOM"  # told first, after the run opened
    [warning] = _warnings(second)
    assert warning["code"] == "UNRECOGNISED_RESUME_ENTRY" and "int-stranger" in warning["message"]
    assert second.last["outcome"]["type"] == "success"
    [sent] = [body for path, body in scripted.bodies
              if path == "approve" and body["threadId"] == "gw-p16" and body["runId"] == "r2"]
    assert [e["interruptId"] for e in sent["resume"]] == ["int-1"]
    assert sent["protocolVersion"] == "1.0"  # C64: Countersign's own, on what it sends


async def test_p17_a_resume_on_a_thread_with_nothing_interrupted_runs_as_new_input(gateway, scripted, api):
    body = new_input("gw-p17", resume=[{"interruptId": "int-gone", "status": "cancelled"}])
    streamed = await gateway("x-legacy", body)
    [warning] = _warnings(streamed)
    assert "int-gone" in warning["message"] and "nothing on this thread is waiting" in warning["message"]
    [sent] = [b for path, b in scripted.bodies if path == "legacy" and b["threadId"] == "gw-p17"]
    assert "resume" not in sent
    assert run_of(api, "r1", thread="gw-p17")["status"] in ("streaming", "succeeded")
