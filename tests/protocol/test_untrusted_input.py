"""Properties of the protocol layer against input nobody vetted: agents' bytes, clients' JSON, any resume.

Each door may refuse, but only with its own error type and a code, and
whatever the chunking, order or content, the same input gets the same answer.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from ag_ui.core import EventType, Interrupt, ResumeEntry, RunAgentInput
from hypothesis import given, settings
from hypothesis import strategies as st

from interrupts.protocol import storable
from interrupts.protocol.contract import ThreadGate, Verdict, check_input
from interrupts.protocol.errors import ContractViolation, MalformedMessage, MalformedStream
from interrupts.protocol.sse import SSEReader
from interrupts.protocol.wire import MAX_DEPTH, dump, parse_event, parse_run_input

NOW = datetime(2026, 4, 20, 12, 0, tzinfo=UTC)

# --------------------------------------------------------------------------- #
# The SSE reader: any bytes, cut anywhere
# --------------------------------------------------------------------------- #

# Mostly the stream's own syntax, so the reader's every branch gets reached;
# random bytes too, for what no agent should send.
_PIECES = [b"data:", b"data: ", b"event: e", b"id: 7", b"id", b"retry: 10", b":", b"\n", b"\r", b"\r\n", b"\n\n",
           b"x", b"{}", b" ", "é€😀".encode(), b"\xef\xbb\xbf", b"\xff", b"\xe2\x82", b"\x00"]
_STREAMS = st.lists(st.sampled_from(_PIECES), max_size=40).map(b"".join) | st.binary(max_size=200)


def _read(stream: bytes, cuts: list[int], limit: int):
    """Frames, or the refusal's code: what reading ``stream`` cut at ``cuts`` comes to."""
    reader = SSEReader(max_frame_bytes=limit)
    bounds = [0, *sorted(cuts), len(stream)]
    frames = []
    try:
        for start, end in zip(bounds, bounds[1:], strict=False):
            frames += reader.feed(stream[start:end])
        return frames + reader.close()
    except MalformedStream as refusal:
        return refusal.code


@settings(max_examples=400)
@given(stream=_STREAMS, data=st.data(), limit=st.integers(1, 48))
def test_any_bytes_cut_anywhere_read_the_same_or_are_refused_the_same(stream, data, limit):
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=8), label="cuts")
    whole = _read(stream, [], limit)
    assert _read(stream, cuts, limit) == whole
    assert _read(stream, list(range(1, len(stream))), limit) == whole  # one byte at a time
    if isinstance(whole, str):
        assert whole in {"FRAME_TOO_LARGE", "BAD_ENCODING"}
    else:
        # The bound holds for what is delivered, not only for what is refused.
        assert all(len(frame.data.encode()) <= limit for frame in whole)


# --------------------------------------------------------------------------- #
# JSON into the AG-UI models
# --------------------------------------------------------------------------- #

# Finite floats: JSON text cannot carry NaN or infinities (the text reader refuses Python's spellings of them,
# tests/protocol/test_wire.py), and an already-decoded dict only ever comes from JSON text.
_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text(max_size=8)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)
# Valid wire shapes to start from: mutated a little, most stay close enough to the models to get
# deep into their validation, and some are accepted.
_EVENTS = [
    {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
    {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "success"}},
    {"type": "RUN_FINISHED", "threadId": "t", "runId": "r", "outcome": {"type": "interrupt", "interrupts": [
        {"id": "i", "reason": "confirmation", "responseSchema": {"type": "object"},
         "expiresAt": "2026-01-01T00:00:00Z"}]}},
    {"type": "RUN_ERROR", "message": "m", "code": "C"},
    {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "d"},
    {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "n", "parentMessageId": "m"},
    {"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "{"},
    {"type": "TOOL_CALL_RESULT", "messageId": "m2", "toolCallId": "c", "content": "ok"},
    {"type": "STATE_SNAPSHOT", "snapshot": {"a": 1}},
    {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/a", "value": 1}]},
    {"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "m", "role": "user", "content": "hi"}, {
        "id": "a", "role": "assistant", "toolCalls": [{"id": "c", "type": "function",
                                                       "function": {"name": "n", "arguments": "{}"}}]}]},
    {"type": "CUSTOM", "name": "n", "value": [1]},
]
_INPUTS = [
    {"threadId": "t", "runId": "r", "messages": []},
    {"threadId": "t", "runId": "r", "parentRunId": "p", "messages": [{"id": "m", "role": "user", "content": "hi"}],
     "state": {"a": [1]}, "tools": [], "context": [], "forwardedProps": {"x": None}},
    {"threadId": "t", "runId": "r", "messages": [], "resume": [
        {"interruptId": "i", "status": "resolved", "payload": {"approved": True}},
        {"interruptId": "j", "status": "cancelled", "metadata": {"by": "me"}}]},
]
_VALUES = _JSON | st.sampled_from([e.value for e in EventType] + ["interrupt", "success", "resolved", "cancelled",
                                                                  "assistant", "user", "tool", "function"])


@st.composite
def _mutated(draw, templates):
    """A template with a few of its fields, at any depth, replaced, removed or added."""
    value = json.loads(json.dumps(draw(st.sampled_from(templates))))
    for _ in range(draw(st.integers(0, 3))):
        holder = value
        while True:  # walk down to some object in the value
            children = holder.values() if isinstance(holder, dict) else holder
            inner = [v for v in children if isinstance(v, (dict, list))]
            if not inner or draw(st.booleans()):
                break
            holder = draw(st.sampled_from(inner))
        if isinstance(holder, list):
            holder.append(draw(_VALUES))
            continue
        key = draw(st.sampled_from(sorted(holder)) | st.text(max_size=6)) if holder else draw(st.text(max_size=6))
        if draw(st.booleans()):
            holder.pop(key, None)
        else:
            holder[key] = draw(_VALUES)
    return value


_CANDIDATES = _mutated(_EVENTS) | _mutated(_INPUTS) | _JSON


@settings(max_examples=400)
@given(candidate=_CANDIDATES, as_text=st.booleans())
def test_any_json_is_an_event_or_a_malformed_message(candidate, as_text):
    try:
        event = parse_event(json.dumps(candidate) if as_text else candidate)
    except MalformedMessage as refusal:
        assert refusal.code and refusal.message
        return
    # What is accepted goes back on the wire as it came: stored, it parses to the same model.
    assert parse_event(json.dumps(dump(event))) == event


@settings(max_examples=300)
@given(candidate=_CANDIDATES)
def test_any_json_is_a_run_input_or_a_malformed_message(candidate):
    try:
        run_input = parse_run_input(json.dumps(candidate))
    except MalformedMessage as refusal:
        assert refusal.code and refusal.message
        return
    assert parse_run_input(json.dumps(dump(run_input))) == run_input


@settings(max_examples=100)
@given(text=st.text(max_size=60) | st.binary(max_size=60))
def test_any_text_is_an_event_or_a_malformed_message(text):
    try:
        parse_event(text)
    except MalformedMessage as refusal:
        assert refusal.code in {"BAD_JSON", "BAD_ENCODING", "NOT_AN_OBJECT", "MISSING_TYPE", "UNKNOWN_EVENT_TYPE"}


# --------------------------------------------------------------------------- #
# What can be kept: the check every door shares
# --------------------------------------------------------------------------- #


_CLEAN_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=6), inner, max_size=3
        )
    ),
    max_leaves=10,
)


@given(value=_CLEAN_JSON, where=st.lists(st.sampled_from(["k", 0]), max_size=4), in_key=st.booleans())
def test_a_nul_anywhere_is_found_and_named(value, where, in_key):
    assert storable.problem(value, "The body") is None
    bad = {"a\x00b": 1} if in_key else "a\x00b"
    for step in reversed(where):
        bad = {"k": bad} if step == "k" else [bad]
    path = "bad" + "".join(".k" if step == "k" else "[0]" for step in where) + (".a\x00b" if in_key else "")
    refusal = storable.problem({"keep": value, "bad": bad}, "The body")
    assert refusal.code == "NUL_CHARACTER"
    assert (repr(path) if in_key else f"'{path}'") in refusal.message


def test_depth_is_bounded_exactly_at_the_wire_limit():
    def nested(depth):
        value: list = []
        for _ in range(depth - 1):
            value = [value]
        return value

    assert storable.problem(nested(MAX_DEPTH), "The body") is None
    assert storable.problem(nested(MAX_DEPTH + 1), "The body").code == "TOO_DEEP"
    assert storable.problem({"k": nested(MAX_DEPTH - 1)}, "The body") is None
    assert storable.problem(nested(100_000), "The body").code == "TOO_DEEP"  # no recursion to overflow


# --------------------------------------------------------------------------- #
# The thread gate: any resume against any open batch
# --------------------------------------------------------------------------- #

_IDS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=6)


def _answer(interrupt_id: str, cancelled: bool) -> dict:
    return {"interruptId": interrupt_id, "status": "cancelled"} if cancelled else \
        {"interruptId": interrupt_id, "status": "resolved", "payload": {"approved": True}}


def _input(entries) -> RunAgentInput:
    return RunAgentInput.model_validate({"threadId": "t", "runId": "r2", "messages": [], "resume": entries})


@st.composite
def _batches(draw):
    """Open interrupts (distinct ids, no schema: any answer fits) and a complete answer in any order."""
    ids = draw(st.lists(_IDS, min_size=1, max_size=5, unique=True))
    gate = ThreadGate("t", "r1", tuple(Interrupt(id=i, reason="confirmation") for i in ids))
    answers = [_answer(i, draw(st.booleans())) for i in draw(st.permutations(ids))]
    return gate, ids, answers


@given(_batches())
def test_a_complete_resume_in_any_order_is_accepted_with_one_key(batch):
    gate, _, answers = batch
    verdict = check_input(gate, _input(answers), NOW)
    assert verdict.kind == "resume" and verdict.interrupted_run_id == "r1"
    assert check_input(gate, _input(list(reversed(answers))), NOW).idempotency_key == verdict.idempotency_key


@given(_batches(), st.data())
def test_leaving_any_interrupt_out_is_incomplete_and_names_each_one(batch, data):
    gate, ids, answers = batch
    kept = data.draw(st.lists(st.sampled_from(answers), unique_by=lambda a: a["interruptId"], min_size=1,
                              max_size=len(answers) - 1) if len(answers) > 1 else st.nothing(), label="kept")
    refusal = _refusal(gate, _input(kept))
    missing = [i for i in ids if i not in {a["interruptId"] for a in kept}]
    assert refusal.code == "INCOMPLETE_RESUME" and refusal.details["interrupt_ids"] == missing


@given(_batches(), _IDS)
def test_p16_an_answer_to_an_interrupt_nobody_raised_is_left_out_with_a_warning(batch, stranger):
    gate, ids, answers = batch
    if stranger in ids:
        return
    run_input = _input([*answers, _answer(stranger, False)])
    verdict = check_input(gate, run_input, NOW)
    assert verdict.kind == "resume" and verdict.unrecognised == (stranger,) and stranger in verdict.warnings[0]
    assert [e.interrupt_id for e in verdict.applied_to(run_input).resume] == [a["interruptId"] for a in answers]


@settings(max_examples=300)
@given(_batches(), st.lists(st.tuples(_IDS, st.sampled_from(["resolved", "cancelled"]), st.none() | _JSON),
                            max_size=6), st.booleans())
def test_any_resume_is_a_verdict_or_a_contract_violation(batch, raw, replayable):
    gate, ids, answers = batch
    if replayable:  # a thread whose last accepted resume is on record
        gate = ThreadGate("t", "r1", gate.open_interrupts, tuple(ResumeEntry.model_validate(a) for a in answers), "r0")
    entries = [{"interruptId": i, "status": s, **({"payload": p} if p is not None else {})} for i, s, p in raw]
    try:
        verdict = check_input(gate, _input(entries), NOW)
    except ContractViolation as refusal:
        assert refusal.code and refusal.message
        return
    assert isinstance(verdict, Verdict) and verdict.kind in {"new", "resume", "replay"}
    if verdict.kind == "resume":
        kept = [e["interruptId"] for e in entries if e["interruptId"] not in verdict.unrecognised]
        assert sorted(kept) == sorted(ids)


def _refusal(gate, run_input) -> ContractViolation:
    try:
        check_input(gate, run_input, NOW)
    except ContractViolation as refusal:
        return refusal
    raise AssertionError("accepted")
