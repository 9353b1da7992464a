"""LangGraph's on_interrupt dialect: ag-ui-langgraph's default stream read as an interrupt outcome, and answered.

The events are as ag-ui-langgraph 0.0.47 sends them in its default
configuration (captured from tests/external/langgraph_agent.py
--default-config): ``value`` the interrupt value as JSON text, ``rawEvent``
LangGraph's Interrupt ``{"value", "id"}``.
"""

from __future__ import annotations

import json

import pytest
from ag_ui.core import Interrupt, RunAgentInput
from hypothesis import given, settings
from hypothesis import strategies as st

from interrupts.protocol import dialects
from interrupts.protocol.dialects import langgraph_legacy
from interrupts.protocol.dialects.langgraph_legacy import CANCELLED, IDS_MISSING, MAX_READ, METADATA_KEY, interrupt_id

LEGACY = dialects.for_agent(dialects.LANGGRAPH_LEGACY)
FINISHED = {"type": "RUN_FINISHED", "threadId": "t1", "runId": "r1"}
SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
APPROVAL = {"reason": "tool_call", "message": "Refund 42 EUR on order A-1001?", "toolCallId": "call_refund_0",
            "responseSchema": SCHEMA, "proposal": {"tool": "issue_refund", "args": {"amount": 42}}}
LG_IDS = ["8f10c6ab379009b2acb7dc9549cdb97a", "842d546562341b5b9d0e20cd1582b738"]


def on_interrupt(value, langgraph_id: str | None = None, *, raw: bool = True, text: str | None = None) -> dict:
    """A CUSTOM on_interrupt as ag-ui-langgraph sends it (``raw``: with emit_raw_events, its default)."""
    event = {"type": "CUSTOM", "name": "on_interrupt",
             "value": text if text is not None else (value if isinstance(value, str) else json.dumps(value))}
    if raw:
        event["rawEvent"] = {"value": value, "id": langgraph_id, "response_schema": None}
    return event


def raised(*events, run_id="r1") -> list[dict]:
    read = LEGACY.terminal(dict(FINISHED), list(events), run_id)
    assert read["type"] == "RUN_FINISHED" and read["outcome"]["type"] == "interrupt", read
    interrupts = read["outcome"]["interrupts"]
    for item in interrupts:
        Interrupt.model_validate(item)  # what the hub validates it with
    return interrupts


def test_an_interrupt_reads_as_ag_ui_langgraph_s_own_mapping_with_an_id_of_countersign_s():
    [item] = raised(on_interrupt(APPROVAL, LG_IDS[0]))
    assert {k: item[k] for k in ("reason", "message", "toolCallId", "responseSchema")} == {
        "reason": "tool_call", "message": APPROVAL["message"], "toolCallId": "call_refund_0", "responseSchema": SCHEMA}
    assert item["id"] == interrupt_id("r1", 0) and item["id"].startswith("lg-")
    # The value whole (its extra keys too) and LangGraph's own id stay in the metadata.
    assert item["metadata"]["langgraph"]["raw"] == APPROVAL
    assert item["metadata"][METADATA_KEY] == {"position": 0, "langgraphId": LG_IDS[0]}


def test_ids_are_made_from_the_run_and_the_position_the_same_every_time():
    events = [on_interrupt({"message": "a"}, LG_IDS[0]), on_interrupt({"message": "b"}, LG_IDS[1])]
    first = [i["id"] for i in raised(*events)]
    assert first == [i["id"] for i in raised(*events)] == [interrupt_id("r1", 0), interrupt_id("r1", 1)]
    assert len(set(first)) == 2
    assert first != [i["id"] for i in raised(*events, run_id="r2")]


@pytest.mark.parametrize("value, expected", [
    ({"message": "no reason"}, {"reason": "langgraph:interrupt", "message": "no reason"}),
    ({"reason": "", "message": "kept"}, {"reason": "", "message": "kept"}),
    ({"reason": None, "message": "x"}, {"reason": "langgraph:interrupt", "message": "x"}),
    ("Approve the refund?", {"reason": "langgraph:interrupt", "message": "Approve the refund?"}),
    ({"tool_call_id": "call_1", "response_schema": SCHEMA, "expires_at": "2030-01-01T00:00:00Z"},
     {"reason": "langgraph:interrupt", "toolCallId": "call_1", "responseSchema": SCHEMA,
      "expiresAt": "2030-01-01T00:00:00Z"}),
    ({"toolCallId": "camel", "tool_call_id": "snake"}, {"reason": "langgraph:interrupt", "toolCallId": "camel"}),
    ([1, 2], {"reason": "langgraph:interrupt"}),
])
def test_fields_are_read_as_lg_interrupt_to_agui_reads_them(value, expected):
    for event in (on_interrupt(value, LG_IDS[0]), on_interrupt(value, raw=False)):
        [item] = raised(event)
        assert {k: v for k, v in item.items() if k not in ("id", "metadata")} == expected
        assert item["metadata"]["langgraph"]["raw"] == value


def test_a_field_of_the_wrong_type_is_left_out_and_named_the_value_keeps_it():
    value = {"reason": 7, "message": ["x"], "toolCallId": {"a": 1}, "responseSchema": "no", "expiresAt": 5}
    [item] = raised(on_interrupt(value, LG_IDS[0]))
    assert {k: v for k, v in item.items() if k not in ("id", "metadata")} == {"reason": "langgraph:interrupt"}
    assert item["metadata"][METADATA_KEY]["ignored"] == ["reason", "message", "toolCallId", "responseSchema",
                                                         "expiresAt"]
    assert item["metadata"]["langgraph"]["raw"] == value


def test_without_raw_events_the_json_text_is_read_and_a_string_that_is_not_json_is_the_value():
    [item] = raised(on_interrupt(APPROVAL, raw=False))
    assert item["toolCallId"] == "call_refund_0" and item["metadata"][METADATA_KEY]["langgraphId"] is None
    [plain] = raised(on_interrupt(None, raw=False, text="{not json"))
    assert plain["message"] == "{not json" and "unread" not in plain["metadata"][METADATA_KEY]


def test_raw_event_is_preferred_a_string_value_that_looks_like_json_stays_a_string():
    [item] = raised(on_interrupt("42", LG_IDS[0]))
    assert item["message"] == "42" and item["metadata"]["langgraph"]["raw"] == "42"


@pytest.mark.parametrize("text, why", [
    ('{"message": "a\\u0000b"}', "NUL"),
    ('{"message": "\\ud800"}', "surrogate"),
    ("[" * 300 + "]" * 300, "levels deep"),
    ('{"n": NaN}', "NaN"),
    ('{"n": 1e999}', "too large"),
])
def test_a_value_countersign_cannot_hold_is_kept_as_the_text_it_came_in(text, why):
    [item] = raised(on_interrupt(None, raw=False, text=text))
    assert item["message"] == text and item["metadata"]["langgraph"]["raw"] == text
    assert why in item["metadata"][METADATA_KEY]["unread"]
    json.dumps(item, allow_nan=False)  # storable and sendable as it is


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=50), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["reason", "message", "toolCallId", "tool_call_id", "responseSchema", "expiresAt", "x"]),
        inner, max_size=4), max_leaves=10)), st.booleans())
def test_any_value_raises_a_valid_interrupt(value, raw):
    [item] = raised(on_interrupt(value, LG_IDS[0], raw=raw))
    assert item["id"] == interrupt_id("r1", 0)


def test_several_interrupts_without_langgraph_s_ids_fail_the_run_with_a_code_saying_why():
    read = LEGACY.terminal(dict(FINISHED), [on_interrupt({"message": "a"}, raw=False),
                                            on_interrupt({"message": "b"}, raw=False)], "r1")
    assert read["type"] == "RUN_ERROR" and read["code"] == IDS_MISSING
    assert "emit_raw_events" in read["message"] and "emit_interrupt_outcome=True" in read["message"]
    # One needs no id: a single resume[] entry answers it whatever its id.
    [alone] = raised(on_interrupt({"message": "a"}, raw=False))
    assert alone["message"] == "a"


def test_several_interrupts_naming_one_langgraph_id_twice_fail_the_run_too():
    # The answers go back as a map by LangGraph's id: one key would keep only one answer.
    read = LEGACY.terminal(dict(FINISHED), [on_interrupt({"message": "a"}, LG_IDS[0]),
                                            on_interrupt({"message": "b"}, LG_IDS[0])], "r1")
    assert read["type"] == "RUN_ERROR" and read["code"] == IDS_MISSING


class _Unread(dict):
    """An on_interrupt whose value, if read, fails the test: only its name may be looked at."""

    def get(self, key, default=None):
        assert key in ("type", "name"), f"read {key!r} of an event past MAX_READ"
        return super().get(key, default)

    def __getitem__(self, key):
        assert key in ("type", "name"), f"read {key!r} of an event past MAX_READ"
        return super().__getitem__(key)


def test_past_the_interrupts_a_run_may_raise_values_are_not_read_but_still_counted():
    event = on_interrupt({"message": "x" * 1000}, LG_IDS[0])
    interrupts = raised(*[event] * MAX_READ, *[_Unread(event)] * (5000 - MAX_READ))
    assert len(interrupts) == 5000  # so the hub refuses the run with TOO_MANY_INTERRUPTS and the true count
    assert interrupts[MAX_READ] == {"id": interrupt_id("r1", MAX_READ), "reason": "langgraph:interrupt"}


@pytest.mark.parametrize("terminal", [
    {**FINISHED, "outcome": {"type": "interrupt", "interrupts": [{"id": LG_IDS[0], "reason": "tool_call"}]}},
    {**FINISHED, "outcome": {"type": "success"}},
    {"type": "RUN_ERROR", "message": "boom"},
])
def test_an_end_that_says_how_it_ended_is_read_as_it_says(terminal):
    assert LEGACY.terminal(terminal, [on_interrupt(APPROVAL, LG_IDS[0])], "r1") is terminal


def test_a_run_without_on_interrupt_ends_as_it_says_and_other_custom_events_are_not_kept():
    assert LEGACY.terminal(FINISHED, [], "r1") is FINISHED
    assert LEGACY.keeps({"type": "CUSTOM", "name": "on_interrupt"})
    assert not LEGACY.keeps({"type": "CUSTOM", "name": "countersign.delivery_failed"})
    assert not LEGACY.keeps({"type": "RAW", "name": "on_interrupt"})
    assert LEGACY.notice(FINISHED, [on_interrupt(APPROVAL)]) == ""


def entry(item, status="resolved", payload=None):
    answer = {"interruptId": item["id"], "status": status, "metadata": {"countersign": {"fingerprint": "sha256:x"}}}
    if status == "resolved":
        answer["payload"] = payload
    return answer


def resume(entries, forwarded=None) -> dict:
    return {"threadId": "t1", "runId": "r2", "parentRunId": "r1", "messages": [], "state": {}, "tools": [],
            "context": [], "forwardedProps": forwarded or {}, "resume": entries}


def test_one_interrupt_is_answered_by_its_resume_entry_and_a_client_s_command_is_dropped():
    [item] = raised(on_interrupt(APPROVAL, LG_IDS[0]))
    given = resume([entry(item, payload={"approved": True})], {"command": {"resume": {"approved": True}}, "x": 1})
    shaped = LEGACY.resume_input(given, [item])
    assert shaped["resume"] == given["resume"] and shaped["forwardedProps"] == {"x": 1}
    sent = LEGACY.outgoing(shaped)
    assert sent == shaped  # ag-ui-langgraph: one resolved entry -> Command(resume=payload)
    RunAgentInput.model_validate(sent)


def test_several_are_answered_by_langgraph_s_own_map_and_the_entries_are_not_sent():
    both = raised(on_interrupt({"message": "a"}, LG_IDS[0]), on_interrupt({"message": "b"}, LG_IDS[1]))
    shaped = LEGACY.resume_input(resume([entry(both[0], payload={"approved": True}), entry(both[1], "cancelled")]),
                                 both)
    # The record keeps the contract's entries (the thread's gate and the audit read them) ...
    assert [e["interruptId"] for e in shaped["resume"]] == [both[0]["id"], both[1]["id"]]
    assert shaped["forwardedProps"]["command"]["resume"] == {
        LG_IDS[0]: {"approved": True}, LG_IDS[1]: {CANCELLED: True, "interrupt_id": LG_IDS[1]}}
    # ... and what is sent has none: resume[] would win over forwardedProps.command.resume.
    sent = LEGACY.outgoing(shaped)
    assert "resume" not in sent and sent["forwardedProps"] == shaped["forwardedProps"]
    RunAgentInput.model_validate(sent)


def test_interrupts_the_agent_raised_as_an_outcome_are_answered_by_the_contract_s_resume():
    item = {"id": LG_IDS[0], "reason": "tool_call"}
    given = resume([entry(item, payload={"approved": True})], {"command": {"resume": 1}, "y": 2})
    shaped = LEGACY.resume_input(given, [item])
    assert shaped["resume"] == given["resume"]
    # A client's command never travels beside Countersign's answers, whichever way they were raised:
    # outgoing would send it in place of resume[] (the red team's answer nobody gave).
    assert shaped["forwardedProps"] == {"y": 2}
    assert LEGACY.outgoing(shaped)["resume"] == given["resume"]


def test_no_input_names_a_node_to_skip_to_or_a_resume_of_its_own_in_any_spelling():
    for key in ("node_name", "nodeName", "NodeName"):
        given = {"threadId": "t1", "runId": "r3", "messages": [], "forwardedProps": {key: "ask_approval", "y": 2}}
        assert dialects.steering(given["forwardedProps"]) == [key]
        for dialect in (LEGACY, dialects.for_agent("agui")):
            assert dialect.outgoing(given)["forwardedProps"] == {"y": 2}
    assert dialects.steering({"command": {"goto": "x"}, "y": 2}) == []
    assert dialects.steering({"command": {"resume": 1}}) == ["command.resume"]


def test_new_input_never_carries_a_resume_of_its_own():
    given = {"threadId": "t1", "runId": "r3", "messages": [],
             "forwardedProps": {"command": {"resume": {"approved": True}, "goto": "x"}, "y": 2}}
    assert LEGACY.outgoing(given)["forwardedProps"] == {"command": {"goto": "x"}, "y": 2}
    plain = {"threadId": "t1", "runId": "r4", "messages": [], "forwardedProps": {"y": 2}}
    assert LEGACY.outgoing(plain) is plain
    # Nor for an agent of the plain dialect: ag-ui-langgraph served with
    # emit_interrupt_outcome reads the same channel, outside the inbox.
    assert dialects.for_agent("agui").outgoing(given)["forwardedProps"] == {"command": {"goto": "x"}, "y": 2}
    assert dialects.for_agent("agui").outgoing(plain) is plain


def test_the_dialect_is_registered_under_its_name():
    assert isinstance(LEGACY, langgraph_legacy.LegacyLangGraph) and LEGACY.reshapes_resume
