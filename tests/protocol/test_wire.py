"""Parsing AG-UI JSON into the official models (interrupts/protocol/wire.py)."""

import json

import pytest
from ag_ui.core import (
    CustomEvent,
    Interrupt,
    RunAgentInput,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
)
from ag_ui.encoder import EventEncoder
from hypothesis import given, settings
from hypothesis import strategies as st

from interrupts.protocol.errors import MalformedMessage
from interrupts.protocol.sse import SSEFrame
from interrupts.protocol.wire import (
    MAX_DEPTH,
    dump,
    parse_event,
    parse_frame,
    parse_run_input,
    strip_unknown_outcome,
)

from .. import spec_examples


def refusal(parse, data, **kwargs) -> MalformedMessage:
    with pytest.raises(MalformedMessage) as err:
        parse(data, **kwargs)
    return err.value


def run_finished(**fields) -> dict:
    return {"type": "RUN_FINISHED", "threadId": "thread-1", "runId": "run-1", **fields}


def run_input(**fields) -> dict:
    return {"threadId": "thread-1", "runId": "run-2", "messages": [], **fields}


# -- the examples of interrupts.mdx ------------------------------------------

SPEC_EVENTS = spec_examples.EVENTS

# The spec's resume bodies omit messages, which the 1.0 model requires; a real
# client sends at least [] (see NOTES.md), so they are given one here.
SPEC_RESUMES = [{**body, "messages": []} for body in spec_examples.RESUMES]


def test_minimal_tool_approval_parses_to_an_interrupt_outcome():
    event = parse_event(json.dumps(spec_examples.APPROVAL_EVENT))
    assert isinstance(event, RunFinishedEvent)
    assert (event.thread_id, event.run_id) == ("thread-1", "run-1")
    assert isinstance(event.outcome, RunFinishedInterruptOutcome)
    [interrupt] = event.outcome.interrupts
    assert isinstance(interrupt, Interrupt)
    assert interrupt.id == "int-abc123"
    assert interrupt.reason == "tool_call"
    assert interrupt.message == "Send email to a@b.com with subject 'Hi'?"
    assert interrupt.tool_call_id == "tc-001"
    assert interrupt.response_schema["required"] == ["approved"]
    assert interrupt.expires_at is None and interrupt.metadata is None


def test_approve_with_edits_keeps_schema_and_metadata():
    [interrupt] = parse_event(json.dumps(spec_examples.EMAIL_EDIT_EVENT)).outcome.interrupts
    assert interrupt.tool_call_id == "tc-42"
    edited = interrupt.response_schema["properties"]["editedArgs"]
    assert edited["properties"]["to"] == {"type": "string", "format": "email"}
    assert interrupt.metadata == {"langgraph": {"checkpointId": "ckpt-xyz", "nodeId": "tool_executor"}}


def test_parallel_interrupts_keep_their_order():
    outcome = parse_event(json.dumps(spec_examples.PARALLEL_EVENT)).outcome
    assert [(i.id, i.tool_call_id) for i in outcome.interrupts] == [
        ("i-1", "tc-a"),
        ("i-2", "tc-b"),
        ("i-3", "tc-c"),
    ]
    assert outcome.interrupts[2].message == "Approve sendEmail to z@w.com?"


def test_input_required_form_keeps_expiry_and_has_no_tool_call():
    [interrupt] = parse_event(json.dumps(spec_examples.FORM_EVENT)).outcome.interrupts
    assert interrupt.reason == "input_required"
    assert interrupt.tool_call_id is None
    assert interrupt.expires_at == "2026-04-20T17:00:00Z"
    assert interrupt.response_schema["properties"]["quarter"]["enum"] == ["Q1", "Q2", "Q3", "Q4"]


@pytest.mark.parametrize("wire", SPEC_EVENTS, ids=["minimal", "edits", "parallel", "form"])
def test_spec_events_dump_back_to_the_same_wire_object(wire):
    event = parse_event(json.dumps(wire))
    assert dump(event) == wire  # nothing added, nothing lost, camelCase kept
    assert parse_event(json.dumps(dump(event))) == event


@pytest.mark.parametrize("wire", SPEC_RESUMES, ids=["minimal", "edits", "parallel", "form"])
def test_spec_resumes_parse_and_round_trip(wire):
    run = parse_run_input(json.dumps(wire))
    assert isinstance(run, RunAgentInput)
    assert [entry.interrupt_id for entry in run.resume] == [e["interruptId"] for e in wire["resume"]]
    assert [entry.status for entry in run.resume] == [e["status"] for e in wire["resume"]]
    assert [entry.payload for entry in run.resume] == [e.get("payload") for e in wire["resume"]]
    assert dump(run) == wire
    assert parse_run_input(dump(run)) == run


def test_legacy_run_finished_without_outcome_parses():
    event = parse_event(b'{"type":"RUN_FINISHED","threadId":"t","runId":"r","result":{"ok":1}}')
    assert isinstance(event, RunFinishedEvent)
    assert event.outcome is None
    assert event.result == {"ok": 1}


def test_success_outcome_parses_to_its_variant():
    event = parse_event(json.dumps(run_finished(outcome={"type": "success"})))
    assert isinstance(event.outcome, RunFinishedSuccessOutcome)


def test_unknown_fields_are_kept_and_dumped():
    wire = run_finished(vendorTrace={"span": "abc"})
    wire["outcome"] = {
        "type": "interrupt",
        "interrupts": [{"id": "i", "reason": "acme:review", "priority": 2}],
    }
    event = parse_event(json.dumps(wire))
    assert event.model_extra == {"vendorTrace": {"span": "abc"}}
    assert event.outcome.interrupts[0].model_extra == {"priority": 2}
    assert dump(event) == wire


def test_snake_case_input_is_accepted_and_dumped_as_camel_case():
    event = parse_event({"type": "RUN_FINISHED", "thread_id": "t", "run_id": "r"})
    assert dump(event) == {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}


def test_dump_is_what_the_encoder_puts_on_the_wire():
    event = RunStartedEvent(thread_id="t", run_id="r", protocol_version="1.0")
    frame = EventEncoder().encode(event)
    assert json.loads(frame.removeprefix("data: ")) == dump(event)


def test_parse_frame_reads_the_frame_data():
    event = parse_frame(SSEFrame('{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"hi"}', "ignored", "7"))
    assert event == TextMessageContentEvent(message_id="m", delta="hi")


# -- refusals of events ------------------------------------------------------


def test_bad_json_names_the_position():
    err = refusal(parse_event, '{"type": "RUN_FINISHED", "threadId": "t",}')
    assert err.code == "BAD_JSON"
    assert "line 1, column 41" in err.message
    assert err.details["position"] == 40


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_json_constants_are_bad_json(constant):
    err = refusal(parse_event, f'{{"type": "CUSTOM", "name": "x", "value": {constant}}}')
    assert err.code == "BAD_JSON"
    assert constant.lstrip("-") in err.message


def test_a_number_too_large_for_a_float_is_bad_json():
    err = refusal(parse_event, '{"type": "CUSTOM", "name": "x", "value": 1e400}')
    assert (err.code, "1e400" in err.message) == ("BAD_JSON", True)


def test_an_integer_too_long_to_convert_is_bad_json_not_a_bare_value_error():
    err = refusal(parse_event, '{"type": "CUSTOM", "name": "x", "value": ' + "9" * 5000 + "}")
    assert err.code == "BAD_JSON"
    assert "digits" in err.message


def test_invalid_utf8_bytes_are_refused():
    err = refusal(parse_event, b'{"type": "CUSTOM", "name": "\xff"}')
    assert err.code == "BAD_ENCODING"
    assert "UTF-8" in err.message and err.details["position"] == 28


def test_a_utf8_bom_is_tolerated():
    assert parse_event(b'\xef\xbb\xbf{"type":"RUN_FINISHED","threadId":"t","runId":"r"}').run_id == "r"


@pytest.mark.parametrize(
    "body, kind", [("[]", "array"), ('"RUN_FINISHED"', "string"), ("null", "null"), ("3", "number")]
)
def test_an_event_must_be_an_object(body, kind):
    err = refusal(parse_event, body)
    assert err.code == "NOT_AN_OBJECT"
    assert f"JSON {kind}" in err.message


@pytest.mark.parametrize("body", ['{"threadId": "t", "runId": "r"}', '{"type": null}'])
def test_missing_type(body):
    err = refusal(parse_event, body)
    assert err.code == "MISSING_TYPE"
    assert "'type'" in err.message


def test_unknown_event_type_is_named():
    err = refusal(parse_event, '{"type": "RUN_PAUSED", "threadId": "t", "runId": "r"}')
    assert err.code == "UNKNOWN_EVENT_TYPE"
    assert '"RUN_PAUSED" is not an AG-UI event type' in err.message
    assert err.details["type"] == "RUN_PAUSED"


def test_unknown_event_type_suggests_the_upper_case_spelling():
    err = refusal(parse_event, '{"type": "run_finished"}')
    assert err.code == "UNKNOWN_EVENT_TYPE"
    assert "'RUN_FINISHED'" in err.message


def test_retired_thinking_events_point_to_reasoning():
    err = refusal(parse_event, '{"type": "THINKING_START"}')
    assert err.code == "UNKNOWN_EVENT_TYPE"
    assert "REASONING_" in err.message


def test_a_non_string_type_is_an_unknown_event_type():
    err = refusal(parse_event, '{"type": 17}')
    assert err.code == "UNKNOWN_EVENT_TYPE"
    assert "17" in err.message


def test_empty_interrupts_is_refused_specifically():
    err = refusal(parse_event, json.dumps(run_finished(outcome={"type": "interrupt", "interrupts": []})))
    assert err.code == "EMPTY_INTERRUPTS"
    assert "RUN_FINISHED" in err.message and "interrupts" in err.message
    assert err.details["field"] == "outcome.interrupts"


def test_c2_a_missing_outcome_and_a_bare_success_both_read_as_success():
    from interrupts.protocol.lifecycle import RunLifecycle

    for fields in ({}, {"outcome": {"type": "success"}}):
        finished = run_finished(**fields)
        lifecycle = RunLifecycle(finished["threadId"], finished["runId"])
        lifecycle.accept(parse_event({"type": "RUN_STARTED", "threadId": finished["threadId"],
                                      "runId": finished["runId"]}))
        lifecycle.accept(parse_event(finished))
        assert lifecycle.outcome_type == "success" and lifecycle.interrupts == ()


def test_c3_an_outcome_variant_1_0_does_not_define_is_stripped_and_reads_as_success():
    raw = run_finished(outcome={"type": "handoff", "to": "billing"})
    event = parse_event(json.dumps(raw))
    assert event.outcome is None
    # The caller warns with what was removed.
    stripped, kind = strip_unknown_outcome(raw)
    assert kind == "handoff" and "outcome" not in stripped and stripped["runId"] == raw["runId"]
    assert strip_unknown_outcome(run_finished(outcome={"type": "cancelled"}))[1] is None
    # A variant without a readable type is malformed, not unrecognised.
    assert refusal(parse_event, json.dumps(run_finished(outcome={"type": 7}))).details["field"] == "outcome.type"


@pytest.mark.parametrize("kind", ["success", "cancelled"])
def test_c11_a_success_or_cancelled_outcome_carrying_interrupts_is_refused(kind):
    outcome = {"type": kind, "interrupts": [{"id": "i-1", "reason": "tool_call"}]}
    err = refusal(parse_event, json.dumps(run_finished(outcome=outcome)))
    assert err.code == "INTERRUPTS_OUTSIDE_INTERRUPT_OUTCOME"
    assert err.details["field"] == "outcome.interrupts" and kind in err.message


def test_missing_top_level_field_is_named_in_camel_case():
    err = refusal(parse_event, '{"type": "RUN_FINISHED", "runId": "r"}')
    assert err.code == "MISSING_FIELD"
    assert err.message == "RUN_FINISHED is missing required field 'threadId'."
    assert err.details["field"] == "threadId"


def test_missing_field_even_when_the_rest_is_snake_case():
    err = refusal(parse_event, {"type": "RUN_FINISHED", "thread_id": "t"})
    assert (err.code, err.details["field"]) == ("MISSING_FIELD", "runId")


def test_missing_nested_field_has_its_full_path():
    wire = run_finished(outcome={"type": "interrupt", "interrupts": [{"id": "i-1", "reason": "x"}, {"id": "i-2"}]})
    err = refusal(parse_event, json.dumps(wire))
    assert err.code == "MISSING_FIELD"
    assert err.details["field"] == "outcome.interrupts[1].reason"
    assert "'outcome.interrupts[1].reason'" in err.message


def test_missing_outcome_discriminator_is_a_missing_field():
    err = refusal(parse_event, json.dumps(run_finished(outcome={"interrupts": [{"id": "i", "reason": "r"}]})))
    assert (err.code, err.details["field"]) == ("MISSING_FIELD", "outcome.type")


def test_invalid_field_gives_path_and_pydantic_reason():
    err = refusal(parse_event, json.dumps(run_finished(timestamp="yesterday")))
    assert err.code == "INVALID_FIELD"
    assert err.details["field"] == "timestamp"
    assert "RUN_FINISHED" in err.message and "'timestamp'" in err.message
    assert "valid integer" in err.message


def test_invalid_field_inside_a_tagged_union_has_no_tag_in_its_path():
    wire = {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "no-leading-slash", "value": 1}]}
    err = refusal(parse_event, json.dumps(wire))
    assert err.code == "INVALID_FIELD"
    assert err.details["field"] == "delta[0].path"


def test_too_large_event_is_refused_before_parsing():
    err = refusal(parse_event, '{"type": "CUSTOM", "name": "x", "value": "' + "x" * 200 + '"}', max_bytes=100)
    assert err.code == "TOO_LARGE"
    assert "100-byte limit" in err.message
    assert err.details["size"] > 100


def test_too_large_counts_utf8_bytes_not_characters():
    body = '{"type": "CUSTOM", "name": "' + "€" * 30 + '", "value": 1}'  # 30 chars, 90 bytes
    assert len(body) < 100 < len(body.encode())
    assert refusal(parse_event, body, max_bytes=100).code == "TOO_LARGE"


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_deep_nesting_is_bad_json_about_depth(depth):
    body = '{"type": "CUSTOM", "name": "x", "value": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    err = refusal(parse_event, body)
    assert err.code == "BAD_JSON"
    assert "levels deep" in err.message


def test_the_deepest_accepted_event_can_still_be_dumped_and_encoded():
    body = '{"type": "CUSTOM", "name": "x", "value": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}"
    event = parse_event(body)
    assert isinstance(event, CustomEvent)
    assert parse_event(json.dumps(dump(event))) == event
    assert EventEncoder().encode(event).startswith("data: ")


def test_deep_nesting_in_an_already_decoded_dict_is_refused_too():
    value: list = []
    for _ in range(MAX_DEPTH + 5):
        value = [value]
    assert refusal(parse_event, {"type": "CUSTOM", "name": "x", "value": value}).code == "BAD_JSON"


# -- refusals of run inputs --------------------------------------------------


@pytest.mark.parametrize("field", ["threadId", "runId", "messages"])
def test_run_input_missing_required_field(field):
    body = run_input()
    del body[field]
    err = refusal(parse_run_input, json.dumps(body))
    assert err.code == "MISSING_FIELD"
    assert err.message == f"RunAgentInput is missing required field '{field}'."
    assert err.details["field"] == field


def test_run_input_counts_further_problems():
    err = refusal(parse_run_input, {"threadId": "t"})
    assert err.details["field"] == "runId"
    assert "1 more problem" in err.message


def test_run_input_must_be_an_object():
    err = refusal(parse_run_input, b"[1, 2]")
    assert err.code == "NOT_AN_OBJECT"
    assert "RunAgentInput" in err.message and "array" in err.message


def test_run_input_bad_json_and_size():
    assert refusal(parse_run_input, '{"threadId": ').code == "BAD_JSON"
    assert refusal(parse_run_input, json.dumps(run_input()), max_bytes=10).code == "TOO_LARGE"


def test_resume_metadata_null_is_refused():
    body = run_input(resume=[{"interruptId": "i-1", "status": "resolved", "payload": {}, "metadata": None}])
    err = refusal(parse_run_input, json.dumps(body))
    assert err.code == "INVALID_METADATA"
    assert err.details["field"] == "resume[0].metadata"
    assert "null" in err.message


def test_resume_metadata_must_be_an_object():
    body = run_input(resume=[{"interruptId": "i-1", "status": "cancelled", "metadata": ["sig"]}])
    err = refusal(parse_run_input, body)
    assert err.code == "INVALID_METADATA"
    assert "an array" in err.message


def test_resume_metadata_object_with_null_values_is_fine():
    body = run_input(resume=[{"interruptId": "i-1", "status": "cancelled", "metadata": {"note": None}}])
    assert parse_run_input(body).resume[0].metadata == {"note": None}


def test_resume_status_outside_the_two_values_is_invalid():
    body = run_input(
        resume=[
            {"interruptId": "i-1", "status": "resolved", "payload": {"approved": True}},
            {"interruptId": "i-2", "status": "rejected"},
        ]
    )
    err = refusal(parse_run_input, json.dumps(body))
    assert err.code == "INVALID_FIELD"
    assert err.details["field"] == "resume[1].status"
    assert '"rejected"' in err.message
    assert "'resolved'" in err.message and "'cancelled'" in err.message


def test_invalid_message_content_part_is_named_by_its_path():
    body = run_input(messages=[{"id": "m1", "role": "user", "content": [{"type": "text", "text": 5}]}])
    err = refusal(parse_run_input, body)
    assert err.code == "INVALID_FIELD"
    assert err.details["field"] == "messages[0].content[0].text"
    assert "more problem" not in err.message  # the string branch of content is not a second problem


def test_message_without_role_is_a_missing_field():
    err = refusal(parse_run_input, run_input(messages=[{"id": "m1", "content": "hi"}]))
    assert (err.code, err.details["field"]) == ("MISSING_FIELD", "messages[0].role")


def test_errors_are_json_ready():
    err = refusal(parse_run_input, {"threadId": "t"})
    assert json.loads(json.dumps(err.as_dict()))["code"] == "MISSING_FIELD"


# -- one parse on pydantic's JSON path, where it agrees with the full one ---------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(value=_JSON)
@settings(max_examples=200)
def test_an_event_parsed_from_text_equals_the_one_parsed_from_its_decoded_json(value):
    text = json.dumps({"type": "CUSTOM", "name": "n", "value": value}, ensure_ascii=False)
    assert parse_event(text) == parse_event(json.loads(text))


@pytest.mark.parametrize("text", [
    '{"type":"CUSTOM","name":"n","value":NaN}',
    '{"type":"CUSTOM","name":"n","value":-Infinity}',
    '{"type":"CUSTOM","name":"n","value":1e400}',
    '{"type":"CUSTOM","name":"n","value":' + "1" * 400 + '.0}',
    '{"type":"CUSTOM","name":"n","value":' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + '}',
    '{"type":"CUSTOM","name":"n","value":1} trailing',
    '{"type":"custom","name":"n"}',
    '{"type":"TEXT_MESSAGE_CONTENT","messageId":"m"}',
    '["RUN_STARTED"]',
    '{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[]}}',
])
def test_text_the_json_path_cannot_take_is_refused_as_the_full_path_refuses_it(text):
    # Bytes always take the full path (they are decoded first): the same refusal, word for word.
    from_text, from_bytes = refusal(parse_event, text), refusal(parse_event, text.encode("utf-8"))
    assert (from_text.code, from_text.message) == (from_bytes.code, from_bytes.message)


def test_an_exponent_the_json_path_leaves_to_the_full_one_still_parses():
    assert parse_event('{"type":"CUSTOM","name":"n","value":1e100}').value == 1e100


def test_text_that_kept_its_bom_is_refused_as_json_loads_refuses_it():
    # Bytes may open with a BOM (decoded as utf-8-sig); decoded text that still holds one is not JSON.
    assert refusal(parse_event, '\ufeff{"type":"CUSTOM","name":"n","value":1}').message == (
        "The event is not valid JSON: Unexpected UTF-8 BOM (decode using utf-8-sig) at line 1, column 1.")
