"""One run's event stream as a state machine (interrupts/protocol/lifecycle.py).

Streams are written in their wire (camelCase) form and parsed with
``wire.parse_event``, so each test reads like what an agent really sends.
Faults are asserted by their stable code and by the values their message
must name.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from ag_ui.core import RunAgentInput, TextMessageContentEvent, ToolCallArgsEvent
from hypothesis import given
from hypothesis import strategies as st

from interrupts.demo.mailer import Mailer
from interrupts.protocol.errors import ProtocolError
from interrupts.protocol.lifecycle import (
    DEFAULT_MAX_TOOL_CALL_BYTES,
    ProposedArgs,
    ProposedCall,
    RunLifecycle,
    StreamFault,
)
from interrupts.protocol.wire import dump, parse_event
from interrupts.sdk import run

THREAD, RUN = "thread-1", "run-1"
ARGS = {"to": "a@b.com", "subject": "Hi", "body": "Hello from the mailer"}
ARGS_TEXT = json.dumps(ARGS)


def ev(event_type: str, **fields):
    return parse_event({"type": event_type, **fields})


def started(thread_id: str = THREAD, run_id: str = RUN):
    return ev("RUN_STARTED", threadId=thread_id, runId=run_id)


def finished(outcome: dict | None = None, thread_id: str = THREAD, run_id: str = RUN):
    fields = {"threadId": thread_id, "runId": run_id}
    if outcome is not None:
        fields["outcome"] = outcome
    return ev("RUN_FINISHED", **fields)


def interrupt_outcome(tool_call_id: str = "tc-1") -> dict:
    return {
        "type": "interrupt",
        "interrupts": [
            {
                "id": f"approve-{tool_call_id}",
                "reason": "tool_call",
                "message": "Send email to a@b.com with subject 'Hi'?",
                "toolCallId": tool_call_id,
                "responseSchema": {
                    "type": "object",
                    "properties": {"approved": {"type": "boolean"}},
                    "required": ["approved"],
                },
            }
        ],
    }


def assistant_calling(tool_call_id: str, name: str, arguments: str, message_id: str = "m-1") -> dict:
    return {
        "id": message_id,
        "role": "assistant",
        "toolCalls": [{"id": tool_call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
    }


def snapshot(*messages: dict):
    return ev("MESSAGES_SNAPSHOT", messages=list(messages))


def proposal(tool_call_id: str = "tc-1", deltas=(ARGS_TEXT[:17], ARGS_TEXT[17:]), name: str = "sendEmail"):
    """TOOL_CALL_START, one TOOL_CALL_ARGS per delta, TOOL_CALL_END."""
    return [
        ev("TOOL_CALL_START", toolCallId=tool_call_id, toolCallName=name),
        *(ev("TOOL_CALL_ARGS", toolCallId=tool_call_id, delta=d) for d in deltas),
        ev("TOOL_CALL_END", toolCallId=tool_call_id),
    ]


def mailer_interrupt_run() -> list:
    """The shape the demo mailer sends: proposal, boundary snapshots, interrupt outcome."""
    return [
        started(),
        *proposal(),
        ev("STATE_SNAPSHOT", snapshot={"emails": {"tc-1": {"args": ARGS, "status": "proposed"}}}),
        snapshot(
            {"id": "u-1", "role": "user", "content": "Email a@b.com"},
            assistant_calling("tc-1", "sendEmail", ARGS_TEXT),
        ),
        finished(interrupt_outcome("tc-1")),
    ]


def fed(*events, **kwargs) -> RunLifecycle:
    lifecycle = RunLifecycle(THREAD, RUN, **kwargs)
    for event in events:
        lifecycle.accept(event)
    return lifecycle


def refusal(lifecycle: RunLifecycle, event) -> StreamFault:
    with pytest.raises(StreamFault) as err:
        lifecycle.accept(event)
    return err.value


# --------------------------------------------------------------------------- #
# Well-formed runs
# --------------------------------------------------------------------------- #


def test_the_mailer_interrupt_run_is_well_formed_and_its_proposal_is_reassembled():
    events = mailer_interrupt_run()
    lifecycle = RunLifecycle(THREAD, RUN)
    assert (lifecycle.started, lifecycle.finished, lifecycle.outcome_type) == (False, False, None)
    for event in events:
        lifecycle.accept(event)
    lifecycle.end_of_stream()

    assert lifecycle.started and lifecycle.finished
    assert lifecycle.terminal is events[-1]
    assert lifecycle.outcome_type == "interrupt"
    assert lifecycle.event_count == len(events) == 8
    [asked] = lifecycle.interrupts
    assert asked.tool_call_id == "tc-1"
    # The two deltas split the JSON mid-key; only their concatenation parses.
    assert lifecycle.tool_calls == {"tc-1": ProposedCall("sendEmail", ARGS_TEXT, source="stream", ended=True)}
    name, args, problems = lifecycle.proposed_args(asked.tool_call_id)
    assert (name, args, problems) == ("sendEmail", ARGS, [])


def test_the_real_mailer_stream_and_its_resumed_run_are_well_formed():
    # The demo agent through the SDK driver: what a hub really receives.
    async def events_of(run_input: dict) -> list:
        agent_input = RunAgentInput.model_validate(run_input)
        return [event async for event in run(Mailer(), agent_input)]

    first_input = {
        "threadId": THREAD, "runId": "r1", "state": {}, "tools": [], "context": [], "forwardedProps": {},
        "messages": [{"id": "u1", "role": "user", "content": "Email c@d.com about lunch"}],
    }
    first_events = asyncio.run(events_of(first_input))
    first = RunLifecycle(THREAD, "r1")
    for event in first_events:
        first.accept(parse_event(json.dumps(dump(event))))  # through the wire, as the hub sees it
    first.end_of_stream()
    [asked] = first.interrupts
    name, args, problems = first.proposed_args(asked.tool_call_id)
    assert (name, problems) == ("sendEmail", [])
    assert args == {"to": "c@d.com", "subject": "Lunch", "body": "Email c@d.com about lunch"}

    by_type = {dump(e)["type"]: dump(e) for e in first_events}
    second_events = asyncio.run(events_of({
        **first_input,
        "runId": "r2",
        "state": by_type["STATE_SNAPSHOT"]["snapshot"],
        "messages": by_type["MESSAGES_SNAPSHOT"]["messages"],
        "resume": [{"interruptId": asked.id, "status": "resolved", "payload": {"approved": True}}],
    }))
    second = RunLifecycle(THREAD, "r2")
    for event in second_events:
        second.accept(parse_event(json.dumps(dump(event))))
    second.end_of_stream()
    assert second.outcome_type == "success"
    assert "TOOL_CALL_RESULT" in [e.type.value for e in second_events]
    # The resumed run only mentions the call in its history snapshot.
    assert second.tool_calls[asked.tool_call_id].source == "snapshot"


def test_a_legacy_run_finished_without_outcome_reads_as_success():
    lifecycle = fed(started(), ev("TEXT_MESSAGE_START", messageId="m", role="assistant"),
                    ev("TEXT_MESSAGE_CONTENT", messageId="m", delta="Done."),
                    ev("TEXT_MESSAGE_END", messageId="m"), finished())
    lifecycle.end_of_stream()
    assert lifecycle.terminal.outcome is None
    assert lifecycle.outcome_type == "success"
    assert lifecycle.interrupts == ()


@pytest.mark.parametrize(
    ("terminal", "expected"),
    [
        (finished({"type": "success"}), "success"),
        (finished({"type": "cancelled"}), "cancelled"),
        (finished(interrupt_outcome()), "interrupt"),
        (ev("RUN_ERROR", message="model overloaded", code="UPSTREAM"), "error"),
    ],
)
def test_outcome_type_names_every_way_a_run_ends(terminal, expected):
    lifecycle = fed(started(), terminal)
    lifecycle.end_of_stream()  # any terminal event completes the stream
    assert lifecycle.finished
    assert lifecycle.outcome_type == expected
    assert lifecycle.terminal is terminal


def test_a_resumed_run_may_report_the_result_of_an_earlier_runs_tool_call():
    # run-2 resumes run-1's interrupt: no TOOL_CALL_START for tc-1 here, by the spec.
    lifecycle = RunLifecycle(THREAD, "run-2")
    for event in [
        started(run_id="run-2"),
        snapshot(assistant_calling("tc-1", "sendEmail", ARGS_TEXT)),
        ev("TOOL_CALL_RESULT", messageId="m-2", toolCallId="tc-1", content='{"sent": true}', role="tool"),
        finished({"type": "success"}, run_id="run-2"),
    ]:
        lifecycle.accept(event)
    lifecycle.end_of_stream()
    assert lifecycle.outcome_type == "success"
    assert lifecycle.tool_calls["tc-1"].source == "snapshot"


def test_a_result_for_a_call_nobody_mentioned_is_not_refused_either():
    lifecycle = fed(started(), ev("TOOL_CALL_RESULT", messageId="m", toolCallId="tc-old", content="ok"), finished())
    lifecycle.end_of_stream()
    assert lifecycle.outcome_type == "success"


# --------------------------------------------------------------------------- #
# Faults
# --------------------------------------------------------------------------- #


def test_faults_are_protocol_errors_with_a_json_ready_form():
    fault = refusal(RunLifecycle(THREAD, RUN), ev("STATE_SNAPSHOT", snapshot={}))
    assert isinstance(fault, ProtocolError)
    assert fault.as_dict()["code"] == "NOT_STARTED"
    assert fault.as_dict()["event_type"] == "STATE_SNAPSHOT"


def test_c1_an_event_before_run_started_is_refused():
    fault = refusal(RunLifecycle(THREAD, RUN), ev("TEXT_MESSAGE_START", messageId="m", role="assistant"))
    assert fault.code == "NOT_STARTED"
    assert "TEXT_MESSAGE_START before RUN_STARTED" in fault.message


def test_c1_c8_a_stream_opening_with_run_error_is_the_agent_s_failure_not_a_violation():
    # 1.0 lets an agent refuse a run before starting it (P1, P19): the run ended, as the agent said.
    lifecycle = RunLifecycle(THREAD, RUN)
    error = ev("RUN_ERROR", code="AUTH_FAILED", message="The API key was revoked.")
    lifecycle.accept(error)
    lifecycle.end_of_stream()
    assert (lifecycle.started, lifecycle.finished, lifecycle.outcome_type) == (False, True, "error")
    assert lifecycle.terminal is error
    # Nothing may follow it, not even a RUN_STARTED.
    assert refusal(lifecycle, started()).code == "AFTER_END"


@pytest.mark.parametrize(
    ("thread_id", "run_id", "named"),
    [
        (THREAD, "run-9", ["'run-9'", f"'{RUN}'", "runId"]),
        ("thread-9", RUN, ["'thread-9'", f"'{THREAD}'", "threadId"]),
        ("thread-9", "run-9", ["'thread-9'", f"'{THREAD}'", "'run-9'", f"'{RUN}'"]),
    ],
)
def test_run_started_for_another_run_is_refused_naming_both_ids(thread_id, run_id, named):
    lifecycle = RunLifecycle(THREAD, RUN)
    fault = refusal(lifecycle, started(thread_id, run_id))
    assert fault.code == "RUN_MISMATCH"
    assert fault.message.startswith("RUN_STARTED")
    for value in named:
        assert value in fault.message
    assert fault.details["expected_run_id"] == RUN and fault.details["run_id"] == run_id
    assert not lifecycle.started


def test_run_finished_for_another_run_is_refused_and_does_not_end_the_run():
    lifecycle = fed(started())
    fault = refusal(lifecycle, finished({"type": "success"}, run_id="run-2"))
    assert fault.code == "RUN_MISMATCH"
    assert fault.message.startswith("RUN_FINISHED")
    assert "'run-2'" in fault.message and f"'{RUN}'" in fault.message
    assert not lifecycle.finished and lifecycle.outcome_type is None


def test_a_second_run_started_is_refused():
    lifecycle = fed(started(), ev("STEP_STARTED", stepName="draft"))
    fault = refusal(lifecycle, started())
    assert fault.code == "DUPLICATE_START"
    assert "second RUN_STARTED" in fault.message and RUN in fault.message


@pytest.mark.parametrize(
    ("terminal", "terminal_type"),
    [(finished({"type": "success"}), "RUN_FINISHED"), (ev("RUN_ERROR", message="oops"), "RUN_ERROR")],
)
@pytest.mark.parametrize(
    "late",
    [
        ev("TEXT_MESSAGE_CONTENT", messageId="m", delta="one more thing"),
        ev("RUN_ERROR", message="late error"),
        started(),  # a new run belongs in a new stream
        finished(),
    ],
    ids=lambda e: e.type.value,
)
def test_c5_nothing_may_follow_the_terminal_event(terminal, terminal_type, late):
    if terminal_type == "RUN_FINISHED" and late.type.value == "RUN_ERROR":
        # The one exception, a late RUN_ERROR after RUN_FINISHED (C4): refused once it was used.
        terminal, terminal_type = late, "RUN_ERROR"
        fed_ = fed(started(), finished({"type": "success"}), terminal)
        fault = refusal(fed_, ev("RUN_ERROR", message="later still"))
        assert fault.code == "AFTER_END" and fed_.terminal is terminal
        return
    lifecycle = fed(started(), terminal)
    fault = refusal(lifecycle, late)
    assert fault.code == "AFTER_END"
    assert f"{late.type.value} after {terminal_type}" in fault.message
    assert lifecycle.terminal is terminal  # the first end stands


@pytest.mark.parametrize("outcome", [{"type": "success"}, interrupt_outcome(), None])
def test_c4_c10_a_run_error_after_run_finished_makes_the_run_failed(outcome):
    # Also after an interrupt outcome (C10: an interrupted run is closed, the late RUN_ERROR admitted).
    lifecycle = fed(started(), finished(outcome))
    late = ev("RUN_ERROR", code="COMMIT_FAILED", message="The write failed after all.")
    lifecycle.accept(late)
    lifecycle.end_of_stream()
    assert lifecycle.outcome_type == "error" and lifecycle.terminal is late
    assert lifecycle.interrupts == ()  # a failed run asks nothing


@pytest.mark.parametrize(("opener", "continuation", "key"), [
    ("TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "messageId"),
    ("TEXT_MESSAGE_START", "TEXT_MESSAGE_END", "messageId"),
    ("REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT", "messageId"),
    ("TOOL_CALL_START", "TOOL_CALL_ARGS", "toolCallId"),
    ("TOOL_CALL_START", "TOOL_CALL_END", "toolCallId"),
])
@pytest.mark.parametrize(("opened_by", "tagged"), [("sub-1", "sub-2"), (None, "sub-2")])
def test_c37_a_continuation_tagged_with_another_owner_than_its_opener_is_refused(
        opener, continuation, key, opened_by, tagged):
    extra = {"toolCallName": "sendEmail"} if opener == "TOOL_CALL_START" else {"role": (
        "reasoning" if opener.startswith("REASONING") else "assistant")}
    owner = {"subagentRunId": opened_by} if opened_by else {}
    lifecycle = fed(started(), ev(opener, **{key: "x-1"}, **extra, **owner))
    delta = {} if continuation.endswith("_END") else {"delta": "{}"}
    fault = refusal(lifecycle, ev(continuation, **{key: "x-1"}, **delta, subagentRunId=tagged))
    assert fault.code == "OWNER_MISMATCH"
    assert fault.details == {"event_type": continuation, "subagent_run_id": tagged, "opened_by": opened_by}


def test_c37_an_untagged_or_agreeing_continuation_is_its_opener_s():
    lifecycle = fed(
        started(),
        ev("TEXT_MESSAGE_START", messageId="m-1", role="assistant", subagentRunId="sub-1"),
        ev("TEXT_MESSAGE_CONTENT", messageId="m-1", delta="Hi"),
        ev("TEXT_MESSAGE_CONTENT", messageId="m-1", delta="!", subagentRunId="sub-1"),
        ev("TEXT_MESSAGE_END", messageId="m-1"),
        ev("TOOL_CALL_START", toolCallId="tc-1", toolCallName="sendEmail", subagentRunId="sub-1"),
        ev("TOOL_CALL_ARGS", toolCallId="tc-1", delta=ARGS_TEXT),
        ev("TOOL_CALL_END", toolCallId="tc-1", subagentRunId="sub-1"),
        finished(),
    )
    lifecycle.end_of_stream()
    assert lifecycle.outcome_type == "success"


def test_args_for_a_tool_call_never_started_are_refused():
    lifecycle = fed(started(), *proposal("tc-1"))
    fault = refusal(lifecycle, ev("TOOL_CALL_ARGS", toolCallId="tc-9", delta="{}"))
    assert fault.code == "TOOL_CALL_ORDER"
    assert "TOOL_CALL_ARGS for tc-9" in fault.message and "never started" in fault.message
    assert fault.details["tool_call_id"] == "tc-9"


def test_end_for_a_tool_call_never_started_is_refused():
    fault = refusal(fed(started()), ev("TOOL_CALL_END", toolCallId="tc-9"))
    assert fault.code == "TOOL_CALL_ORDER"
    assert "TOOL_CALL_END for tc-9" in fault.message


def test_args_for_a_call_only_a_snapshot_mentioned_are_refused():
    # Knowing a call from history does not make it open in this run.
    lifecycle = fed(started(), snapshot(assistant_calling("tc-1", "sendEmail", ARGS_TEXT)))
    fault = refusal(lifecycle, ev("TOOL_CALL_ARGS", toolCallId="tc-1", delta="{}"))
    assert fault.code == "TOOL_CALL_ORDER"


def test_args_after_the_calls_end_are_refused_and_not_appended():
    lifecycle = fed(started(), *proposal("tc-1", deltas=[ARGS_TEXT]))
    fault = refusal(lifecycle, ev("TOOL_CALL_ARGS", toolCallId="tc-1", delta=', "bcc": "x@y.com"'))
    assert fault.code == "TOOL_CALL_ORDER"
    assert "after its TOOL_CALL_END" in fault.message
    assert lifecycle.tool_calls["tc-1"].args_text == ARGS_TEXT


def test_starting_the_same_tool_call_twice_is_refused():
    lifecycle = fed(started(), *proposal("tc-1"))
    fault = refusal(lifecycle, ev("TOOL_CALL_START", toolCallId="tc-1", toolCallName="deleteAll"))
    assert fault.code == "TOOL_CALL_ORDER"
    assert "tc-1" in fault.message and "already started" in fault.message
    assert lifecycle.tool_calls["tc-1"].name == "sendEmail"


def test_a_stream_that_stops_mid_run_is_incomplete():
    lifecycle = fed(started(), ev("TOOL_CALL_START", toolCallId="tc-1", toolCallName="sendEmail"),
                    ev("TOOL_CALL_ARGS", toolCallId="tc-1", delta='{"to": "a@'))
    with pytest.raises(StreamFault) as err:
        lifecycle.end_of_stream()
    fault = err.value
    assert fault.code == "INCOMPLETE_STREAM"
    assert "3 events" in fault.message and "TOOL_CALL_ARGS" in fault.message
    assert "RUN_FINISHED or RUN_ERROR" in fault.message
    assert fault.details == {"event_count": 3, "last_event_type": "TOOL_CALL_ARGS"}


def test_a_stream_of_only_run_started_is_incomplete_in_the_singular():
    with pytest.raises(StreamFault) as err:
        fed(started()).end_of_stream()
    assert err.value.code == "INCOMPLETE_STREAM"
    assert "after 1 event without" in err.value.message
    assert "RUN_STARTED" in err.value.message


def test_an_empty_stream_never_started():
    with pytest.raises(StreamFault) as err:
        RunLifecycle(THREAD, RUN).end_of_stream()
    assert err.value.code == "NOT_STARTED"
    assert "empty stream" in err.value.message


def test_refused_events_are_not_counted():
    lifecycle = fed(started())
    refusal(lifecycle, ev("TOOL_CALL_END", toolCallId="tc-9"))
    with pytest.raises(StreamFault) as err:
        lifecycle.end_of_stream()
    assert err.value.details == {"event_count": 1, "last_event_type": "RUN_STARTED"}


# --------------------------------------------------------------------------- #
# Reassembling proposals
# --------------------------------------------------------------------------- #


def test_args_known_only_from_a_messages_snapshot():
    # An integration (LangGraph, say) that never streams the call.
    lifecycle = fed(
        started(),
        snapshot(
            {"id": "u-1", "role": "user", "content": "Email a@b.com"},
            assistant_calling("tc-lg", "sendEmail", ARGS_TEXT),
        ),
        finished(interrupt_outcome("tc-lg")),
    )
    assert lifecycle.tool_calls == {"tc-lg": ProposedCall("sendEmail", ARGS_TEXT, source="snapshot", ended=True)}
    assert lifecycle.proposed_args("tc-lg") == ProposedArgs("sendEmail", ARGS, [])


def test_a_later_snapshot_replaces_an_earlier_snapshots_view():
    lifecycle = fed(
        started(),
        snapshot(assistant_calling("tc-1", "sendEmail", '{"to": "old@b.com"}')),
        snapshot(assistant_calling("tc-1", "sendEmail", '{"to": "new@b.com"}')),
    )
    assert lifecycle.proposed_args("tc-1").args == {"to": "new@b.com"}


def test_streamed_deltas_win_over_a_snapshot_that_disagrees_and_the_disagreement_is_reported():
    lifecycle = fed(
        started(),
        *proposal("tc-1"),
        snapshot(assistant_calling("tc-1", "sendMail", json.dumps({**ARGS, "to": "evil@x.com"}))),
    )
    name, args, problems = lifecycle.proposed_args("tc-1")
    assert (name, args) == ("sendEmail", ARGS)
    assert len(problems) == 2
    assert "'sendMail'" in problems[0] and "'sendEmail'" in problems[0]
    assert "different arguments for tc-1" in problems[1]


def test_a_snapshot_that_only_reformats_the_streamed_args_is_no_problem():
    lifecycle = fed(
        started(),
        *proposal("tc-1"),
        snapshot(assistant_calling("tc-1", "sendEmail", json.dumps(ARGS, indent=2, sort_keys=True))),
    )
    assert lifecycle.proposed_args("tc-1").problems == []


def test_a_snapshot_before_the_stream_is_overridden_by_the_stream():
    lifecycle = fed(
        started(),
        snapshot(assistant_calling("tc-1", "sendEmail", '{"to": "draft@b.com"}')),
        *proposal("tc-1"),
    )
    call = lifecycle.tool_calls["tc-1"]
    assert (call.source, call.args_text) == ("stream", ARGS_TEXT)
    assert lifecycle.proposed_args("tc-1").args == ARGS


def test_chunk_events_reassemble_calls_and_an_id_less_chunk_continues_the_last_call():
    lifecycle = fed(
        started(),
        ev("TOOL_CALL_CHUNK", toolCallId="tc-1", toolCallName="sendEmail", delta='{"to": "a@b.com", '),
        ev("TOOL_CALL_CHUNK", delta='"subject": "Hi", '),
        ev("TOOL_CALL_CHUNK", delta='"body": "Hello from the mailer"}'),
        ev("TOOL_CALL_CHUNK", toolCallId="tc-2", toolCallName="archive", delta='{"id": 7}'),
        ev("TOOL_CALL_CHUNK", toolCallId="tc-2"),  # an id, no delta: nothing to add
        finished(),
    )
    assert lifecycle.proposed_args("tc-1") == ProposedArgs("sendEmail", ARGS, [])
    assert lifecycle.proposed_args("tc-2") == ProposedArgs("archive", {"id": 7}, [])
    # Chunked calls need no TOOL_CALL_END: the next call and the run's end close them.
    assert all(call.ended for call in lifecycle.tool_calls.values())
    assert list(lifecycle.tool_calls) == ["tc-1", "tc-2"]


def test_a_chunk_switching_calls_closes_the_previous_one():
    lifecycle = fed(
        started(),
        ev("TOOL_CALL_CHUNK", toolCallId="tc-1", toolCallName="a", delta="{}"),
        ev("TOOL_CALL_CHUNK", toolCallId="tc-2", toolCallName="b", delta="{}"),
    )
    assert lifecycle.tool_calls["tc-1"].ended and not lifecycle.tool_calls["tc-2"].ended
    fault = refusal(lifecycle, ev("TOOL_CALL_CHUNK", toolCallId="tc-1", delta="x"))
    assert fault.code == "TOOL_CALL_ORDER" and "tc-1" in fault.message


def test_an_id_less_chunk_with_nothing_open_is_refused():
    fault = refusal(fed(started()), ev("TOOL_CALL_CHUNK", delta='{"to": "a@b.com"}'))
    assert fault.code == "TOOL_CALL_ORDER"
    assert "without toolCallId" in fault.message


def test_the_first_chunk_of_a_call_must_name_its_tool():
    fault = refusal(fed(started()), ev("TOOL_CALL_CHUNK", toolCallId="tc-1", delta="{}"))
    assert fault.code == "TOOL_CALL_ORDER"
    assert "tc-1" in fault.message and "toolCallName" in fault.message


def test_c27_invalid_json_args_are_a_problem_not_an_exception():
    lifecycle = fed(started(), *proposal("tc-1", deltas=['{"to": "a@b.com",', ' "subject": }']), finished())
    name, args, problems = lifecycle.proposed_args("tc-1")
    assert name == "sendEmail"
    assert args == '{"to": "a@b.com", "subject": }'  # the raw text, kept for the audit
    [problem] = problems
    assert problem.startswith("The TOOL_CALL_ARGS text of tc-1 is not valid JSON")
    assert "column" in problem


@pytest.mark.parametrize(
    ("text", "expected_args", "fragment"),
    [
        ('["a@b.com"]', ["a@b.com"], "is a JSON array, not an object"),
        ("42", "42", "is a number, not an object"),
        ('"a@b.com"', '"a@b.com"', "is a string, not an object"),
        ("", "", "is empty"),
        ('{"n": NaN}', '{"n": NaN}', "NaN"),
    ],
)
def test_args_that_are_not_a_json_object_are_reported(text, expected_args, fragment):
    lifecycle = fed(started(), *proposal("tc-1", deltas=[text] if text else []))
    name, args, problems = lifecycle.proposed_args("tc-1")
    assert args == expected_args
    assert len(problems) == 1 and fragment in problems[0]


def test_c26_a_call_without_tool_call_end_is_incomplete_and_a_run_cannot_finish_on_it():
    lifecycle = fed(started(), ev("TOOL_CALL_START", toolCallId="tc-1", toolCallName="sendEmail"),
                    ev("TOOL_CALL_ARGS", toolCallId="tc-1", delta=ARGS_TEXT))
    assert not lifecycle.tool_calls["tc-1"].ended
    name, args, problems = lifecycle.proposed_args("tc-1")
    assert args == ARGS
    assert problems == ["No TOOL_CALL_END has arrived for tc-1; its arguments may be incomplete."]
    # Nothing is proposed to anyone from arguments that never ended (C45 makes the run's end fatal).
    fault = refusal(lifecycle, finished(interrupt_outcome("tc-1")))
    assert fault.code == "OPEN_AT_END" and "'tc-1'" in fault.message
    assert not lifecycle.finished


def test_c45_message_order_is_fatal():
    lifecycle = fed(started(), ev("TEXT_MESSAGE_START", messageId="m-1"))
    assert refusal(lifecycle, ev("TEXT_MESSAGE_START", messageId="m-1")).code == "MESSAGE_ORDER"
    assert refusal(lifecycle, ev("TEXT_MESSAGE_CONTENT", messageId="m-2", delta="x")).code == "MESSAGE_ORDER"
    assert refusal(lifecycle, ev("REASONING_MESSAGE_END", messageId="m-3")).code == "MESSAGE_ORDER"
    fault = refusal(lifecycle, finished())
    assert fault.code == "OPEN_AT_END" and fault.details["open_ids"] == ["m-1"]
    # Closed, it may reopen (P53), and the run may finish; a chunked call still open closes with it.
    for event in (ev("TEXT_MESSAGE_END", messageId="m-1"), ev("TEXT_MESSAGE_START", messageId="m-1"),
                  ev("TEXT_MESSAGE_END", messageId="m-1"),
                  ev("TOOL_CALL_CHUNK", toolCallId="tc-9", toolCallName="t", delta="{}"), finished()):
        lifecycle.accept(event)
    assert lifecycle.outcome_type == "success" and lifecycle.tool_calls["tc-9"].ended


def test_an_unknown_tool_call_is_a_problem_naming_the_known_ones():
    lifecycle = fed(started(), *proposal("tc-1"))
    name, args, problems = lifecycle.proposed_args("tc-9")
    assert (name, args) == (None, None)
    assert problems == ["tool call tc-9 was not proposed in this run (the stream mentions tc-1)."]
    assert "mentions no tool call" in RunLifecycle(THREAD, RUN).proposed_args("tc-9").problems[0]


def test_tool_calls_is_a_copy():
    lifecycle = fed(started(), *proposal("tc-1"))
    lifecycle.tool_calls.clear()
    assert list(lifecycle.tool_calls) == ["tc-1"]


@given(st.lists(st.text(max_size=12), max_size=12))
def test_args_are_the_deltas_concatenated_in_order(deltas):
    lifecycle = fed(started(), ev("TEXT_MESSAGE_START", messageId="m"),
                    ev("TOOL_CALL_START", toolCallId="tc-1", toolCallName="t"))
    for delta in deltas:
        lifecycle.accept(ToolCallArgsEvent(tool_call_id="tc-1", delta=delta))
        lifecycle.accept(TextMessageContentEvent(message_id="m", delta="interleaved"))  # another item's
    assert lifecycle.tool_calls["tc-1"].args_text == "".join(deltas)


# --------------------------------------------------------------------------- #
# Memory bound
# --------------------------------------------------------------------------- #


def test_the_default_cap_is_8_mib():
    assert RunLifecycle(THREAD, RUN).max_tool_call_bytes == DEFAULT_MAX_TOOL_CALL_BYTES == 8 * 1024 * 1024


def test_args_over_the_cap_are_too_large_and_the_refused_delta_is_not_kept():
    lifecycle = fed(started(), ev("TOOL_CALL_START", toolCallId="tc-1", toolCallName="sendEmail"),
                    max_tool_call_bytes=100)
    lifecycle.accept(ev("TOOL_CALL_ARGS", toolCallId="tc-1", delta="x" * 60))
    fault = refusal(lifecycle, ev("TOOL_CALL_ARGS", toolCallId="tc-1", delta="y" * 60))
    assert fault.code == "TOO_LARGE"
    assert "100-byte limit" in fault.message and "tc-1" in fault.message
    assert fault.details["limit"] == 100 and fault.details["size"] > 100
    assert lifecycle.tool_calls["tc-1"].args_text == "x" * 60


def test_the_cap_counts_utf8_bytes_across_all_calls_of_the_run():
    # Each call holds id + name + args = 1 + 1 + 30 bytes, though only 17 characters:
    # two fit a 63-character cap, but not a 63-byte one.
    lifecycle = fed(started(), max_tool_call_bytes=63)
    lifecycle.accept(ev("TOOL_CALL_CHUNK", toolCallId="a", toolCallName="t", delta="é" * 15))
    fault = refusal(lifecycle, ev("TOOL_CALL_CHUNK", toolCallId="b", toolCallName="t", delta="é" * 15))
    assert fault.code == "TOO_LARGE"
    # The refused chunk neither opened b nor closed a.
    assert list(lifecycle.tool_calls) == ["a"] and not lifecycle.tool_calls["a"].ended
    lifecycle.accept(ev("TOOL_CALL_CHUNK", delta="é"))
    assert lifecycle.tool_calls["a"].args_text == "é" * 16


def test_snapshot_args_count_against_the_cap_too():
    lifecycle = fed(started(), max_tool_call_bytes=1000)
    big = json.dumps({"body": "x" * 2000})
    fault = refusal(lifecycle, snapshot(assistant_calling("tc-1", "sendEmail", big)))
    assert fault.code == "TOO_LARGE"
    assert lifecycle.tool_calls == {}


def test_repeated_snapshots_of_the_same_history_do_not_exhaust_the_cap():
    history = snapshot(assistant_calling("tc-1", "sendEmail", ARGS_TEXT))
    lifecycle = fed(started(), max_tool_call_bytes=200)
    for _ in range(50):
        lifecycle.accept(history)
    assert lifecycle.proposed_args("tc-1").args == ARGS


def test_the_budget_is_exact_and_a_streamed_call_keeps_its_snapshot_copy_charged():
    # Snapshot first: id + name + text; the stream then adds its own name and
    # text, the snapshot's copy staying held for comparison.
    exact = len("tc-1") + 2 * len("sendEmail") + 2 * len(ARGS_TEXT)
    events = [started(), snapshot(assistant_calling("tc-1", "sendEmail", ARGS_TEXT)), *proposal("tc-1")]
    fed(*events, max_tool_call_bytes=exact)
    lifecycle = RunLifecycle(THREAD, RUN, max_tool_call_bytes=exact - 1)
    with pytest.raises(StreamFault) as err:
        for event in events:
            lifecycle.accept(event)
    assert err.value.code == "TOO_LARGE"
    assert err.value.details["size"] == exact


# --------------------------------------------------------------------------- #
# Subagents' streams (AG-UI 1.0, C38, C39, C41)
# --------------------------------------------------------------------------- #


def chunk(owner=None, **fields):
    return ev("TOOL_CALL_CHUNK", **fields, **({"subagentRunId": owner} if owner else {}))


def test_c38_interleaved_subagents_keep_their_own_chunked_calls_and_one_ending_closes_only_its_own():
    lifecycle = fed(
        started(),
        chunk("sub-1", toolCallId="tc-a", toolCallName="sendEmail", delta='{"to": '),
        chunk("sub-2", toolCallId="tc-b", toolCallName="archive", delta='{"id": '),
        chunk("sub-1", delta='"a@b.com"}'),
        ev("SUBAGENT_FINISHED", subagentRunId="sub-1"),
        chunk("sub-2", delta="7}"),
        finished(),
    )
    lifecycle.end_of_stream()
    assert lifecycle.proposed_args("tc-a").args == {"to": "a@b.com"}
    assert lifecycle.proposed_args("tc-b").args == {"id": 7}


def test_c39_an_untagged_id_less_chunk_two_subagents_could_continue_is_refused():
    lifecycle = fed(
        started(),
        chunk("sub-1", toolCallId="tc-a", toolCallName="sendEmail", delta="{"),
        chunk("sub-2", toolCallId="tc-b", toolCallName="archive", delta="{"),
    )
    fault = refusal(lifecycle, chunk(delta="}"))
    assert fault.code == "AMBIGUOUS_CHUNK" and "2 subagents" in fault.message
    # With one subagent's stream open it is unambiguous, and continues that one.
    lifecycle = fed(started(), chunk("sub-1", toolCallId="tc-a", toolCallName="sendEmail", delta="{"),
                    chunk(delta="}"), finished())
    assert lifecycle.proposed_args("tc-a").args == {}


def test_c41_run_error_abandons_open_invocations_without_closing_events():
    lifecycle = fed(
        started(),
        ev("SUBAGENT_STARTED", subagentRunId="sub-1", name="mailer"),
        ev("TOOL_CALL_START", toolCallId="tc-1", toolCallName="sendEmail", subagentRunId="sub-1"),
        ev("RUN_ERROR", code="CRASH", message="the parent crashed"),
    )
    lifecycle.end_of_stream()  # no SUBAGENT_FINISHED or TOOL_CALL_END is expected
    assert lifecycle.outcome_type == "error"


def test_c9_a_new_run_starts_with_nothing_open():
    # Run 1 left a call open and ended; run 2 cannot continue it, and run 1's RUN_ERROR ended what was open.
    first = fed(started(), ev("TOOL_CALL_START", toolCallId="tc-1", toolCallName="sendEmail"),
                ev("RUN_ERROR", message="boom"))
    first.end_of_stream()
    second = RunLifecycle(THREAD, "run-2")
    second.accept(started(run_id="run-2"))
    assert refusal(second, ev("TOOL_CALL_ARGS", toolCallId="tc-1", delta="{}")).code == "TOOL_CALL_ORDER"
