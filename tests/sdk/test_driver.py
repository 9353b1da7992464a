"""The driver owns the run's frame: first event, boundary snapshots, one terminal event."""

import asyncio

import pytest
from ag_ui.core import RunAgentInput

from interrupts.protocol.wire import dump
from interrupts.sdk import Agent, AgentError, InterruptDefinition, RunOutcome, interrupt, run


async def events_of(agent, **input_fields) -> list[dict]:
    run_input = RunAgentInput.model_validate({"threadId": "t", "runId": "r", "messages": [], **input_fields})
    return [dump(event) async for event in run(agent, run_input)]


def types(events) -> list[str]:
    return [e["type"] for e in events]


class Scripted(Agent):
    """An agent whose run is a function given by the test."""

    def __init__(self, body):
        self.body = body

    async def run(self, ctx):
        return await self.body(ctx)


async def test_run_started_comes_first_and_run_finished_last():
    async def body(ctx):
        ctx.say("hello")
        return RunOutcome.success(result={"ok": 1})

    events = await events_of(Scripted(body), parentRunId="r0")
    assert types(events) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert events[0] == {**events[0], "threadId": "t", "runId": "r", "parentRunId": "r0"}
    assert events[-1]["outcome"] == {"type": "success"}
    assert events[-1]["result"] == {"ok": 1}
    assert all(isinstance(e["timestamp"], int) for e in events)


async def test_an_interrupt_outcome_is_preceded_by_state_and_messages_snapshots():
    async def body(ctx):
        ctx.set_state({"step": 1})
        ctx.say("need a human")
        return RunOutcome.interrupt([interrupt("i-1", "confirmation", message="ok?")])

    events = await events_of(Scripted(body), messages=[{"id": "u1", "role": "user", "content": "go"}])
    assert types(events)[-3:] == ["STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert events[-3]["snapshot"] == {"step": 1}
    # The snapshot holds the input's messages and what this run said.
    assert [m["id"] for m in events[-2]["messages"]][0] == "u1"
    assert events[-2]["messages"][1]["content"] == "need a human"
    assert events[-1]["outcome"]["interrupts"] == [{"id": "i-1", "reason": "confirmation", "message": "ok?"}]


@pytest.mark.parametrize(
    "outcome, fragment",
    [
        (RunOutcome.interrupt([]), "at least one interrupt"),
        (RunOutcome.interrupt([interrupt("a", "x"), interrupt("a", "y")]), "appears twice"),
        (RunOutcome.interrupt([interrupt("a", "tool_call")]), "no toolCallId"),
        (RunOutcome.interrupt([interrupt("a", "x", response_schema={"type": 12})]), "Interrupt 'a'"),
        ("done", "not a RunOutcome"),
    ],
)
async def test_an_invalid_outcome_becomes_run_error_protocol(outcome, fragment):
    async def body(ctx):
        return outcome

    events = await events_of(Scripted(body))
    assert types(events) == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1]["code"] == "PROTOCOL"
    assert fragment in events[-1]["message"]


def test_validate_accepts_success_and_refuses_an_empty_interrupt_list():
    RunOutcome.success().validate()
    RunOutcome.interrupt([interrupt("a", "confirmation")]).validate()
    with pytest.raises(AgentError, match="at least one"):
        RunOutcome.interrupt([]).validate()


async def test_an_exception_in_the_agent_becomes_run_error_agent_error():
    async def body(ctx):
        ctx.say("about to fail")
        raise KeyError("build")

    events = await events_of(Scripted(body))
    assert types(events) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_ERROR",
    ]
    assert events[-1]["code"] == "AGENT_ERROR"
    assert "KeyError" in events[-1]["message"] and "build" in events[-1]["message"]


async def test_an_agent_error_keeps_its_code():
    async def body(ctx):
        raise AgentError("quota exhausted", code="QUOTA")

    events = await events_of(Scripted(body))
    assert events[-1] == {**events[-1], "code": "QUOTA", "message": "quota exhausted"}


PICK = InterruptDefinition(
    id="pick",
    response_schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
)


async def answered_with(payload, status="resolved"):
    async def body(ctx):
        answer = ctx.resume_for(PICK)
        if answer is None:
            return RunOutcome.interrupt([PICK.interrupt()])
        ctx.say(f"got {answer.payload}")
        return RunOutcome.success()

    entry = {"interruptId": "pick", "status": status}
    if payload is not None:
        entry["payload"] = payload
    return await events_of(Scripted(body), resume=[entry])


async def test_an_answer_that_fails_the_definition_becomes_invalid_resume():
    events = await answered_with({"n": "three"})
    assert types(events) == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1]["code"] == "INVALID_RESUME"
    assert "/n" in events[-1]["message"]


async def test_a_resolved_answer_without_payload_becomes_invalid_resume():
    events = await answered_with(None)
    assert events[-1]["code"] == "INVALID_RESUME"
    assert "no payload" in events[-1]["message"]


async def test_a_valid_answer_reaches_the_agent():
    events = await answered_with({"n": 3})
    assert events[-1]["outcome"] == {"type": "success"}
    assert any(e.get("delta") == "got {'n': 3}" for e in events)


async def test_a_cancelled_answer_is_not_validated():
    async def body(ctx):
        return RunOutcome.success(result=ctx.resume_for(PICK).status)

    events = await events_of(Scripted(body), resume=[{"interruptId": "pick", "status": "cancelled"}])
    assert events[-1]["result"] == "cancelled"


async def test_a_result_for_an_earlier_runs_tool_call_starts_with_a_messages_snapshot():
    earlier_call = {
        "id": "m1",
        "role": "assistant",
        "toolCalls": [
            {"id": "tc-1", "type": "function", "function": {"name": "sendEmail", "arguments": '{"to": "a@b.com"}'}}
        ],
    }

    async def body(ctx):
        assert ctx.tool_call_args("tc-1") == {"to": "a@b.com"}
        ctx.tool_result("tc-1", {"sent": True})
        return RunOutcome.success()

    events = await events_of(Scripted(body), messages=[earlier_call])
    assert types(events) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "TOOL_CALL_RESULT", "RUN_FINISHED"]
    assert events[1]["messages"][0]["toolCalls"][0]["id"] == "tc-1"
    assert events[2]["toolCallId"] == "tc-1"


async def test_a_result_for_an_unknown_tool_call_fails_the_run_clearly():
    async def body(ctx):
        ctx.tool_result("tc-nowhere", "done")
        return RunOutcome.success()

    events = await events_of(Scripted(body))
    assert events[-1]["code"] == "AGENT_ERROR"
    assert "tc-nowhere" in events[-1]["message"]


async def test_state_changes_after_the_first_snapshot_are_sent_as_json_patch():
    async def body(ctx):
        ctx.set_state({"emails": [], "n": 1})
        ctx.set_state({"emails": ["a"], "n": 1})
        ctx.patch_state([{"op": "replace", "path": "/n", "value": 2}])
        return RunOutcome.success(result=ctx.state)

    events = await events_of(Scripted(body))
    assert types(events)[1:4] == ["STATE_SNAPSHOT", "STATE_DELTA", "STATE_DELTA"]
    assert events[2]["delta"] == [{"op": "add", "path": "/emails/0", "value": "a"}]
    assert events[-1]["result"] == {"emails": ["a"], "n": 2}


async def test_events_stream_while_the_agent_is_still_running():
    gate = asyncio.Event()

    async def body(ctx):
        ctx.say("first")
        await gate.wait()
        return RunOutcome.success()

    run_input = RunAgentInput(thread_id="t", run_id="r", messages=[])
    stream = run(Scripted(body), run_input)
    seen = [await anext(stream) for _ in range(4)]
    assert [e.type.value for e in seen][-1] == "TEXT_MESSAGE_END"
    gate.set()
    rest = [e async for e in stream]
    assert rest[-1].type.value == "RUN_FINISHED"


def test_context_reads_the_resume():
    from interrupts.sdk import RunContext

    run_input = RunAgentInput.model_validate(
        {"threadId": "t", "runId": "r", "messages": [], "resume": [
            {"interruptId": "approve-deploy", "status": "resolved", "payload": {"build": 42}},
            {"interruptId": "confirm-clear", "status": "cancelled"},
        ]}
    )
    ctx = RunContext(run_input, lambda event: None)
    assert ctx.is_resume()
    assert len(ctx.resume()) == 2
    assert ctx.resume_for("approve-deploy").status == "resolved"
    assert ctx.resume_for("confirm-clear").status == "cancelled"
    assert ctx.resume_for("something-else") is None
    assert not RunContext(RunAgentInput(thread_id="t", run_id="r", messages=[]), print).is_resume()


async def test_p64_run_started_declares_the_agent_s_own_version_never_the_input_s():
    async def body(ctx):
        return RunOutcome.success()

    events = await events_of(Scripted(body), protocolVersion="1.7")
    assert events[0]["protocolVersion"] == "1.0"
