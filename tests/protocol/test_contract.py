"""The interrupt contract's eight rules, built from the AG-UI "Interrupts" examples.

Each rule has a passing case and at least one refusing case; refusals are
asserted by their stable code and the ids their message must name.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from ag_ui.core import Interrupt, ResumeEntry, RunAgentInput
from hypothesis import given
from hypothesis import strategies as st

from interrupts.protocol.contract import (
    ThreadGate,
    Verdict,
    check_coverage,
    check_entry,
    check_input,
    idempotency_key,
    interrupt_problems,
    outcome_problems,
    parse_expiry,
)
from interrupts.protocol.errors import ContractViolation

from .. import spec_examples

UTC = UTC
NOW = datetime(2026, 4, 20, 12, 0, tzinfo=UTC)  # before int-form's expiry
FORM_EXPIRY = datetime(2026, 4, 20, 17, 0, tzinfo=UTC)


# --------------------------------------------------------------------------- #
# The four spec examples, parsed from their wire (camelCase) form
# --------------------------------------------------------------------------- #

APPROVAL = Interrupt.model_validate(spec_examples.APPROVAL)
EMAIL_EDIT = Interrupt.model_validate(spec_examples.EMAIL_EDIT)
PARALLEL = tuple(Interrupt.model_validate(raw) for raw in spec_examples.PARALLEL)
FORM = Interrupt.model_validate(spec_examples.FORM)

GATE_1 = ThreadGate("thread-1", "run-1", (APPROVAL,))
GATE_2 = ThreadGate("thread-2", "run-10", (EMAIL_EDIT,))
GATE_3 = ThreadGate("thread-3", "run-20", PARALLEL)
GATE_4 = ThreadGate("thread-4", "run-30", (FORM,))


def run_input(thread_id: str, run_id: str, resume=None, **extra) -> RunAgentInput:
    """A RunAgentInput parsed from its wire form, as the gateway would receive it."""
    body = {"threadId": thread_id, "runId": run_id, "messages": [], **extra}
    if resume is not None:
        body["resume"] = resume
    return RunAgentInput.model_validate(body)


def entry(interrupt_id: str, status: str = "resolved", **fields) -> ResumeEntry:
    """A ResumeEntry from wire-form fields."""
    return ResumeEntry.model_validate({"interruptId": interrupt_id, "status": status, **fields})


# The spec's resumes, as the entries of their wire bodies.
RESUME_1 = spec_examples.APPROVAL_RESUME["resume"]
RESUME_2 = spec_examples.EMAIL_EDIT_RESUME["resume"]
RESUME_3 = spec_examples.PARALLEL_RESUME["resume"]
RESUME_4 = spec_examples.FORM_RESUME["resume"]


def refused(gate: ThreadGate, inp: RunAgentInput, now: datetime = NOW) -> ContractViolation:
    """The ContractViolation check_input raises (failing the test if it accepts)."""
    with pytest.raises(ContractViolation) as exc:
        check_input(gate, inp, now)
    return exc.value


def entry_refused(interrupt: Interrupt, e: ResumeEntry, now: datetime = NOW) -> ContractViolation:
    """The ContractViolation check_entry raises."""
    with pytest.raises(ContractViolation) as exc:
        check_entry(interrupt, e, now)
    return exc.value


# --------------------------------------------------------------------------- #
# The spec's own resumes are accepted
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("gate", "resume", "run_id"),
    [
        (GATE_1, RESUME_1, "run-2"),
        (GATE_2, RESUME_2, "run-11"),
        (GATE_3, RESUME_3, "run-21"),
        (GATE_4, RESUME_4, "run-31"),
    ],
)
def test_spec_examples_resume(gate, resume, run_id):
    verdict = check_input(gate, run_input(gate.thread_id, run_id, resume), NOW)
    assert verdict.kind == "resume"
    assert verdict.interrupted_run_id == gate.open_run_id
    assert verdict.replay_of_run_id is None
    entries = [ResumeEntry.model_validate(r) for r in resume]
    assert verdict.idempotency_key == idempotency_key(gate.thread_id, entries)


def test_new_input_on_a_quiet_thread():
    assert check_input(ThreadGate("thread-1"), run_input("thread-1", "run-1"), NOW) == Verdict("new")


def test_empty_resume_on_a_quiet_thread_is_new_input():
    assert check_input(ThreadGate("thread-1"), run_input("thread-1", "run-1", []), NOW).kind == "new"


def test_parent_run_id_is_not_enforced():
    # Rule 2: parentRunId keeps its branching semantics, orthogonal to resume linkage.
    for parent in ("run-1", "some-other-run", None):
        extra = {"parentRunId": parent} if parent else {}
        assert check_input(GATE_1, run_input("thread-1", "run-2", RESUME_1, **extra), NOW).kind == "resume"


# --------------------------------------------------------------------------- #
# Rule 1: same thread
# --------------------------------------------------------------------------- #


def test_thread_mismatch_refused():
    err = refused(GATE_1, run_input("thread-2", "run-2", RESUME_1))
    assert err.code == "THREAD_MISMATCH"
    assert "thread-1" in err.message and "thread-2" in err.message
    assert err.details["expected_thread_id"] == "thread-1"


def test_thread_mismatch_wins_even_for_new_input_and_replays():
    gate = ThreadGate("thread-1", last_resume=tuple(ResumeEntry.model_validate(r) for r in RESUME_1))
    assert refused(gate, run_input("thread-9", "run-2", RESUME_1)).code == "THREAD_MISMATCH"
    assert refused(ThreadGate("thread-1"), run_input("thread-9", "run-1")).code == "THREAD_MISMATCH"


# --------------------------------------------------------------------------- #
# Rule 2: resume linkage
# --------------------------------------------------------------------------- #


def test_p16_unknown_entry_is_left_out_with_a_warning():
    # AG-UI 1.0 P16 (the seed contract refused it as UNKNOWN_INTERRUPT).
    resume = [*RESUME_1, {"interruptId": "int-nope", "status": "cancelled"}]
    inp = run_input("thread-1", "run-2", resume)
    verdict = check_input(GATE_1, inp, NOW)
    assert verdict.kind == "resume" and verdict.unrecognised == ("int-nope",)
    assert "int-nope" in verdict.warnings[0] and "run-1" in verdict.warnings[0]
    assert [e.interrupt_id for e in verdict.applied_to(inp).resume] == ["int-abc123"]
    # The key is the recognised answer's: the same answer without the stranger replays it.
    assert verdict.idempotency_key == check_input(GATE_1, run_input("thread-1", "run-2", RESUME_1), NOW).idempotency_key


def test_p19_only_unknown_entries_leave_the_open_interrupt_uncovered():
    # Another thread's answer names nothing here: left out, and then nothing covers int-abc123.
    err = refused(GATE_1, run_input("thread-1", "run-2", RESUME_4))
    assert err.code == "INCOMPLETE_RESUME"
    assert err.details["interrupt_ids"] == ["int-abc123"]


def test_c12_unknown_entry_in_what_countersign_sends_is_refused():
    # Countersign's own resumes are held to C12 strictly (check_coverage), not forgiven as a client's are.
    with pytest.raises(ContractViolation) as exc:
        check_coverage(["int-abc123"], [entry("int-abc123"), entry("int-nope", "cancelled")], "run-1")
    assert exc.value.code == "UNKNOWN_INTERRUPT" and exc.value.details["interrupt_id"] == "int-nope"


def test_c14_c15_countersign_covers_each_interrupt_exactly_once():
    check_coverage(["i-1", "i-2"], [entry("i-2", "cancelled"), entry("i-1")], "run-20")
    with pytest.raises(ContractViolation) as exc:
        check_coverage(["i-1", "i-2"], [entry("i-1")], "run-20")
    assert exc.value.code == "INCOMPLETE_RESUME" and exc.value.details["interrupt_ids"] == ["i-2"]
    with pytest.raises(ContractViolation) as exc:
        check_coverage(["i-1"], [entry("i-1"), entry("i-1", "cancelled")], "run-20")
    assert exc.value.code == "DUPLICATE_ENTRY"


def test_duplicate_entry_refused():
    resume = [*RESUME_3, {"interruptId": "i-1", "status": "cancelled"}]
    err = refused(GATE_3, run_input("thread-3", "run-21", resume))
    assert err.code == "DUPLICATE_ENTRY"
    assert err.details["interrupt_id"] == "i-1"


def test_identical_duplicate_entry_also_refused():
    err = refused(GATE_1, run_input("thread-1", "run-2", RESUME_1 * 2))
    assert err.code == "DUPLICATE_ENTRY"


# --------------------------------------------------------------------------- #
# Rule 3: cover all open interrupts
# --------------------------------------------------------------------------- #


def test_partial_resume_names_the_missing_interrupt():
    err = refused(GATE_3, run_input("thread-3", "run-21", RESUME_3[:2]))
    assert err.code == "INCOMPLETE_RESUME"
    assert err.details["interrupt_ids"] == ["i-3"]
    assert err.details["interrupt_id"] == "i-3"
    assert "i-3" in err.message and "i-1" not in err.message


def test_partial_resume_lists_every_missing_interrupt_in_order():
    err = refused(GATE_3, run_input("thread-3", "run-21", RESUME_3[1:2]))
    assert err.details["interrupt_ids"] == ["i-1", "i-3"]
    assert "interrupt_id" not in err.details


def test_resume_order_does_not_matter():
    assert check_input(GATE_3, run_input("thread-3", "run-21", RESUME_3[::-1]), NOW).kind == "resume"


# --------------------------------------------------------------------------- #
# Rule 4: pending interrupts block new input
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("resume", [None, []])
def test_new_input_while_pending_refused(resume):
    err = refused(GATE_3, run_input("thread-3", "run-21", resume))
    assert err.code == "PENDING_INTERRUPTS"
    assert err.details["interrupt_ids"] == ["i-1", "i-2", "i-3"]
    assert err.details["interrupted_run_id"] == "run-20"
    assert all(i in err.message for i in ("i-1", "i-2", "i-3", "run-20"))


def test_p17_resume_with_nothing_open_is_new_input_with_a_warning():
    # AG-UI 1.0 P17 (the seed contract refused it as NOTHING_TO_RESUME).
    inp = run_input("thread-1", "run-2", RESUME_1)
    verdict = check_input(ThreadGate("thread-1"), inp, NOW)
    assert verdict.kind == "new" and verdict.unrecognised == ("int-abc123",)
    assert "nothing on this thread is waiting" in verdict.warnings[0]
    assert verdict.applied_to(inp).resume is None


def test_p17_still_answers_to_the_last_resume_as_already_resolved():
    # An interrupt Countersign raised and already answered is recognised, not unknown: the
    # client lost a race with a reviewer, and must hear so rather than start a new run.
    gate = ThreadGate("thread-1", last_resume=tuple(ResumeEntry.model_validate(e) for e in RESUME_1),
                      last_resume_run_id="run-2")
    other = [{"interruptId": "int-abc123", "status": "cancelled"}]
    assert refused(gate, run_input("thread-1", "run-3", other)).code == "ALREADY_RESOLVED"


# --------------------------------------------------------------------------- #
# Rule 5: idempotency / replay
# --------------------------------------------------------------------------- #


def answered(gate: ThreadGate, resume: list[dict], run_id: str, **rest) -> ThreadGate:
    """The gate after the hub accepted *resume* as *run_id* (nothing open any more)."""
    return ThreadGate(
        gate.thread_id,
        last_resume=tuple(ResumeEntry.model_validate(r) for r in resume),
        last_resume_run_id=run_id,
        **rest,
    )


def test_identical_resume_is_a_replay():
    gate = answered(GATE_3, RESUME_3, "run-21")
    verdict = check_input(gate, run_input("thread-3", "run-21-retry", RESUME_3), NOW)
    assert verdict.kind == "replay"
    assert verdict.replay_of_run_id == "run-21"
    assert verdict.idempotency_key == idempotency_key("thread-3", gate.last_resume)


def test_reordered_resume_is_a_replay():
    gate = answered(GATE_3, RESUME_3, "run-21")
    assert check_input(gate, run_input("thread-3", "run-22", RESUME_3[::-1]), NOW).kind == "replay"


def test_replay_ignores_metadata():
    gate = answered(GATE_1, RESUME_1, "run-2")
    resume = [{**RESUME_1[0], "metadata": {"signature": "retry-2"}}]
    assert check_input(gate, run_input("thread-1", "run-3", resume), NOW).kind == "replay"


def test_replay_is_accepted_after_expiry():
    # It was valid when accepted; replaying it dispatches nothing new.
    gate = answered(GATE_4, RESUME_4, "run-31")
    assert (
        check_input(gate, run_input("thread-4", "run-31", RESUME_4), FORM_EXPIRY + timedelta(days=1)).kind == "replay"
    )


def test_replay_while_the_resumed_run_is_interrupted_again():
    # run-2 answered int-abc123 and itself stopped on a new interrupt: a retried
    # identical resume is still a replay, not a missing answer to int-next.
    nxt = Interrupt(id="int-next", reason="confirmation")
    gate = answered(GATE_1, RESUME_1, "run-2", open_run_id="run-2", open_interrupts=(nxt,))
    assert check_input(gate, run_input("thread-1", "run-3", RESUME_1), NOW).kind == "replay"
    assert refused(gate, run_input("thread-1", "run-3")).code == "PENDING_INTERRUPTS"


def test_same_ids_different_payload_is_already_resolved():
    gate = answered(GATE_1, RESUME_1, "run-2")
    changed = [{"interruptId": "int-abc123", "status": "resolved", "payload": {"approved": False}}]
    err = refused(gate, run_input("thread-1", "run-3", changed))
    assert err.code == "ALREADY_RESOLVED"
    assert err.details["interrupt_id"] == "int-abc123"
    assert "run-2" in err.message


def test_same_ids_different_status_is_already_resolved():
    gate = answered(GATE_3, RESUME_3, "run-21")
    changed = [dict(r, status="cancelled") for r in RESUME_3]
    for r in changed:
        r.pop("payload", None)
    err = refused(gate, run_input("thread-3", "run-22", changed))
    assert err.code == "ALREADY_RESOLVED"
    assert err.details["interrupt_ids"] == ["i-1", "i-2", "i-3"]


def test_true_and_one_are_different_answers():
    gate = answered(GATE_1, RESUME_1, "run-2")
    one = [{"interruptId": "int-abc123", "status": "resolved", "payload": {"approved": 1}}]
    assert refused(gate, run_input("thread-1", "run-3", one)).code == "ALREADY_RESOLVED"


def test_subset_of_accepted_resume_is_already_resolved():
    gate = answered(GATE_3, RESUME_3, "run-21")
    assert refused(gate, run_input("thread-3", "run-22", RESUME_3[:1])).code == "ALREADY_RESOLVED"


def test_reopened_id_is_answerable_not_already_resolved():
    # An agent that reuses an interrupt id in a later run: the open one wins.
    again = Interrupt(id="int-abc123", reason="tool_call", toolCallId="tc-002")
    gate = answered(GATE_1, RESUME_1, "run-2", open_run_id="run-2", open_interrupts=(again,))
    deny = [{"interruptId": "int-abc123", "status": "resolved", "payload": {"approved": False}}]
    assert check_input(gate, run_input("thread-1", "run-3", deny), NOW).kind == "resume"


# idempotency_key properties


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def resumes(draw):
    """A resume batch with distinct ids, statuses and JSON payloads."""
    ids = draw(st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=4, unique=True))
    out = []
    for iid in ids:
        status = draw(st.sampled_from(["resolved", "cancelled"]))
        payload = draw(JSON) if status == "resolved" else None
        meta = draw(st.none() | st.dictionaries(st.text(max_size=4), JSON, max_size=2))
        out.append(ResumeEntry(interrupt_id=iid, status=status, payload=payload, metadata=meta))
    return out


def _strip_meta(entries):
    """The same entries without metadata."""
    return [e.model_copy(update={"metadata": None}) for e in entries]


@given(resumes(), st.randoms(use_true_random=False))
def test_key_is_order_and_metadata_insensitive(entries, rnd):
    key = idempotency_key("thread-3", entries)
    shuffled = list(entries)
    rnd.shuffle(shuffled)
    assert idempotency_key("thread-3", shuffled) == key
    assert idempotency_key("thread-3", _strip_meta(shuffled)) == key
    assert len(key) == 64 and int(key, 16) >= 0  # hex sha-256


@given(resumes(), JSON, JSON)
def test_key_changes_with_payload(entries, p1, p2):
    first = entries[0].model_copy(update={"status": "resolved", "payload": p1})
    second = entries[0].model_copy(update={"status": "resolved", "payload": p2})
    k1 = idempotency_key("t", [first, *entries[1:]])
    k2 = idempotency_key("t", [second, *entries[1:]])
    if p1 != p2:
        assert k1 != k2


@given(resumes())
def test_key_depends_on_thread(entries):
    assert idempotency_key("thread-a", entries) != idempotency_key("thread-b", entries)


def test_key_examples():
    approve = entry("int-abc123", payload={"approved": True})
    assert idempotency_key("thread-1", [approve]) != idempotency_key(
        "thread-1", [entry("int-abc123", payload={"approved": 1})]
    )
    assert idempotency_key("thread-1", [approve]) != idempotency_key("thread-1", [entry("int-abc123", "cancelled")])
    assert idempotency_key("thread-1", [approve]) != idempotency_key(
        "thread-1", [entry("int-other", payload={"approved": True})]
    )
    # Key order inside the payload is not part of the answer.
    a = entry("i", payload={"x": 1, "y": [1, {"b": 2, "a": 1}]})
    b = entry("i", payload={"y": [1, {"a": 1, "b": 2}], "x": 1})
    assert idempotency_key("t", [a]) == idempotency_key("t", [b])
    # Ids cannot bleed into each other across entries.
    assert idempotency_key("t", [entry("a,b", "cancelled")]) != idempotency_key(
        "t", [entry("a", "cancelled"), entry("b", "cancelled")]
    )
    # Unicode and even a lone surrogate hash without error.
    assert idempotency_key("t", [entry("i", payload="é\ud800")]) != idempotency_key("t", [entry("i", payload="é")])


# --------------------------------------------------------------------------- #
# Rule 6: payload validation
# --------------------------------------------------------------------------- #


def test_invalid_payload_refused_with_error_path():
    bad = [{"interruptId": "int-form", "status": "resolved", "payload": {"quarter": "Q5", "year": 2026, "revenue": 1}}]
    err = refused(GATE_4, run_input("thread-4", "run-31", bad))
    assert err.code == "INVALID_PAYLOAD"
    assert err.details["interrupt_id"] == "int-form"
    assert [e["path"] for e in err.details["errors"]] == ["/quarter"]


def test_year_minimum_enforced():
    err = entry_refused(FORM, entry("int-form", payload={"quarter": "Q1", "year": 1999, "revenue": 1.5}))
    assert err.code == "INVALID_PAYLOAD"
    assert err.details["errors"][0]["path"] == "/year"


def test_edited_email_format_enforced():
    payload = {"approved": True, "editedArgs": {"to": "nobody", "subject": "Hi", "body": "x"}}
    err = entry_refused(EMAIL_EDIT, entry("int-email-edit", payload=payload))
    assert err.code == "INVALID_PAYLOAD"
    assert err.details["errors"] == [{"path": "/editedArgs/to", "message": "'nobody' is not a 'email'"}]


def test_denial_is_a_resolved_payload():
    check_entry(APPROVAL, entry("int-abc123", payload={"approved": False}), NOW)


def test_non_object_edited_args_refused_on_tool_interrupt_even_if_schema_allows_it():
    loose = APPROVAL.model_copy(update={"response_schema": {"type": "object"}})
    err = entry_refused(loose, entry("int-abc123", payload={"approved": True, "editedArgs": "to=x"}))
    assert err.code == "INVALID_PAYLOAD"
    assert err.details["errors"][0]["path"] == "/editedArgs"
    # Without a schema too: the parallel interrupts are tool-bound.
    err = entry_refused(PARALLEL[0], entry("i-1", payload={"approved": True, "editedArgs": None}))
    assert err.code == "INVALID_PAYLOAD"


def test_no_schema_accepts_any_payload_or_none():
    for payload in ({"approved": True}, "ok", 1, None):
        check_entry(PARALLEL[0], entry("i-1", payload=payload), NOW)


def test_broken_schema_is_invalid_schema_not_a_crash():
    broken = APPROVAL.model_copy(update={"response_schema": {"type": 12}})
    gate = ThreadGate("thread-1", "run-1", (broken,))
    err = refused(gate, run_input("thread-1", "run-2", RESUME_1))
    assert err.code == "INVALID_SCHEMA"
    assert err.details["interrupt_id"] == "int-abc123"


def test_unresolvable_ref_is_invalid_schema():
    broken = APPROVAL.model_copy(update={"response_schema": {"$ref": "#/$defs/missing"}})
    assert entry_refused(broken, entry("int-abc123", payload={"approved": True})).code == "INVALID_SCHEMA"


def test_broken_schema_interrupt_can_still_be_cancelled():
    broken = APPROVAL.model_copy(update={"response_schema": {"type": 12}})
    check_entry(broken, entry("int-abc123", "cancelled"), NOW)


# --------------------------------------------------------------------------- #
# Rule 7: expiry
# --------------------------------------------------------------------------- #


def test_resume_before_expiry_accepted():
    assert (
        check_input(GATE_4, run_input("thread-4", "run-31", RESUME_4), FORM_EXPIRY - timedelta(seconds=1)).kind
        == "resume"
    )


@pytest.mark.parametrize(
    "now", [FORM_EXPIRY, FORM_EXPIRY + timedelta(microseconds=1), FORM_EXPIRY + timedelta(days=30)]
)
def test_resume_at_or_after_expiry_refused(now):
    err = refused(GATE_4, run_input("thread-4", "run-31", RESUME_4), now)
    assert err.code == "EXPIRED"
    assert err.details["interrupt_id"] == "int-form"
    assert "int-form" in err.message and "2026-04-20T17:00:00Z" in err.message


def test_c20_cancelling_after_expiry_is_accepted():
    # 1.0: an expired interrupt is still covered, abandoned with cancelled; only resolving it is refused (C19).
    check_entry(FORM, entry("int-form", "cancelled"), FORM_EXPIRY)
    assert entry_refused(FORM, entry("int-form", payload={"choice": "a"}), FORM_EXPIRY).code == "EXPIRED"


def test_expiry_is_checked_before_the_payload():
    assert entry_refused(FORM, entry("int-form", payload={"nope": 1}), FORM_EXPIRY).code == "EXPIRED"


def test_now_in_another_zone_is_compared_in_utc():
    paris_just_before = datetime(2026, 4, 20, 18, 59, 59, tzinfo=timezone(timedelta(hours=2)))
    check_entry(FORM, ResumeEntry.model_validate(RESUME_4[0]), paris_just_before)
    paris_at = datetime(2026, 4, 20, 19, 0, tzinfo=timezone(timedelta(hours=2)))
    assert entry_refused(FORM, ResumeEntry.model_validate(RESUME_4[0]), paris_at).code == "EXPIRED"


@pytest.mark.parametrize(
    "raw",
    ["2026-04-20T17:00:00Z", "2026-04-20T19:00:00+02:00", "2026-04-20T12:00:00-05:00", "2026-04-20T17:00:00",
     "2026-04-20 17:00:00z", " 2026-04-20t17:00:00.000Z ", "20260420T170000Z"],
)
def test_parse_expiry_reads_offsets_as_utc(raw):
    parsed = parse_expiry(raw)
    assert parsed == FORM_EXPIRY
    assert parsed.utcoffset() == timedelta(0)


def test_offset_expiry_refuses_at_the_same_instant():
    offset = FORM.model_copy(update={"expires_at": "2026-04-20T19:00:00+02:00"})
    e = ResumeEntry.model_validate(RESUME_4[0])
    check_entry(offset, e, FORM_EXPIRY - timedelta(seconds=1))
    assert entry_refused(offset, e, FORM_EXPIRY).code == "EXPIRED"


@pytest.mark.skipif(not hasattr(time, "tzset"), reason="needs time.tzset")
def test_naive_expiry_is_utc_whatever_the_server_zone(monkeypatch):
    # A naive timestamp must not be read in the server's local zone.
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert parse_expiry("2026-04-20T17:00:00") == FORM_EXPIRY
    finally:
        monkeypatch.undo()
        time.tzset()


def test_parse_expiry_none_and_bare_date():
    assert parse_expiry(None) is None
    assert parse_expiry("2026-04-20") == datetime(2026, 4, 20, tzinfo=UTC)


@pytest.mark.parametrize(
    "raw", ["", "   ", "tomorrow", "2026-13-01T00:00:00Z", "2026-04-20T25:00:00Z", "1745168400",
            "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"],
)
def test_parse_expiry_refuses_unparsable(raw):
    with pytest.raises(ContractViolation) as exc:
        parse_expiry(raw)
    assert exc.value.code == "INVALID_EXPIRY"


def test_parse_expiry_refuses_non_strings():
    with pytest.raises(ContractViolation) as exc:
        parse_expiry(1745168400)  # type: ignore[arg-type]
    assert exc.value.code == "INVALID_EXPIRY"


def test_c18_unparsable_expiry_is_judged_expired_only_a_cancel_is_taken():
    # Unparsable must never mean "never expires".
    garbled = FORM.model_copy(update={"expires_at": "next tuesday"})
    gate = ThreadGate("thread-4", "run-30", (garbled,))
    err = refused(gate, run_input("thread-4", "run-31", RESUME_4))
    assert err.code == "INVALID_EXPIRY"
    assert err.details["interrupt_id"] == "int-form"
    assert "next tuesday" in err.message
    check_entry(garbled, entry("int-form", "cancelled"), FORM_EXPIRY)


@pytest.mark.parametrize("now", [datetime(2026, 4, 20, 12, 0), "2026-04-20T12:00:00Z", None])
def test_now_must_be_an_aware_datetime(now):
    with pytest.raises((TypeError, ValueError)):
        check_input(GATE_4, run_input("thread-4", "run-31", RESUME_4), now)
    with pytest.raises((TypeError, ValueError)):
        check_entry(FORM, ResumeEntry.model_validate(RESUME_4[0]), now)
    with pytest.raises((TypeError, ValueError)):
        check_input(ThreadGate("t"), run_input("t", "r"), now)


# --------------------------------------------------------------------------- #
# Rule 8 and the entry envelope
# --------------------------------------------------------------------------- #


def test_missing_payload_refused():
    err = refused(GATE_4, run_input("thread-4", "run-31", [{"interruptId": "int-form", "status": "resolved"}]))
    assert err.code == "MISSING_PAYLOAD"
    assert err.details["interrupt_id"] == "int-form"


def test_null_payload_counts_as_missing():
    assert entry_refused(APPROVAL, entry("int-abc123", payload=None)).code == "MISSING_PAYLOAD"


def test_cancelled_with_payload_refused():
    resume = [*RESUME_3[:2], {"interruptId": "i-3", "status": "cancelled", "payload": {"approved": False}}]
    err = refused(GATE_3, run_input("thread-3", "run-21", resume))
    assert err.code == "PAYLOAD_ON_CANCEL"
    assert err.details["interrupt_id"] == "i-3"


def test_cancelled_without_payload_on_schemad_interrupt_is_fine():
    assert (
        check_input(
            GATE_4, run_input("thread-4", "run-31", [{"interruptId": "int-form", "status": "cancelled"}]), NOW
        ).kind
        == "resume"
    )
    check_entry(APPROVAL, entry("int-abc123", "cancelled"), NOW)


@pytest.mark.parametrize("status", ["resolved", "cancelled"])
def test_reserved_metadata_key_refused_on_either_status(status):
    payload = {"payload": {"approved": True}} if status == "resolved" else {}
    e = entry("int-abc123", status, metadata={"ag-ui": {"x": 1}}, **payload)
    err = entry_refused(APPROVAL, e)
    assert err.code == "RESERVED_METADATA_KEY"
    assert err.details["interrupt_id"] == "int-abc123"


def test_other_metadata_allowed_including_null_values():
    e = entry("int-abc123", payload={"approved": True}, metadata={"signature": "abc", "routing": None})
    check_entry(APPROVAL, e, NOW)


@pytest.mark.parametrize("metadata", [[1, 2], "signed", 3])
def test_non_object_metadata_refused(metadata):
    # pydantic would refuse it at parse time; model_construct simulates a caller that bypassed parsing.
    e = ResumeEntry.model_construct(
        interrupt_id="int-abc123", status="resolved", payload={"approved": True}, metadata=metadata
    )
    err = entry_refused(APPROVAL, e)
    assert err.code == "INVALID_METADATA"
    assert err.details["interrupt_id"] == "int-abc123"


def test_unknown_status_refused():
    e = ResumeEntry.model_construct(interrupt_id="int-abc123", status="approved", payload={"approved": True})
    assert entry_refused(APPROVAL, e).code == "INVALID_STATUS"


def test_check_entry_for_the_wrong_interrupt_is_a_programming_error():
    with pytest.raises(ValueError):
        check_entry(APPROVAL, entry("int-form", payload={}), NOW)


def test_per_entry_failures_are_reported_through_check_input():
    resume = [*RESUME_3[:2], {"interruptId": "i-3", "status": "cancelled", "metadata": {"ag-ui": 1}}]
    err = refused(GATE_3, run_input("thread-3", "run-21", resume))
    assert err.code == "RESERVED_METADATA_KEY"
    assert err.details["interrupt_id"] == "i-3"


# --------------------------------------------------------------------------- #
# Check order
# --------------------------------------------------------------------------- #


def test_structure_is_checked_before_entries():
    # An expired, partial resume is refused as incomplete: structure first.
    err = refused(GATE_3, run_input("thread-3", "run-21", RESUME_3[:2]), FORM_EXPIRY + timedelta(days=1))
    assert err.code == "INCOMPLETE_RESUME"
    # An unknown entry is left out (P16): what it leaves uncovered is still refused (P19).
    err = refused(GATE_3, run_input("thread-3", "run-21", [RESUME_3[0], {"interruptId": "i-9", "status": "cancelled"}]))
    assert err.code == "INCOMPLETE_RESUME" and err.details["interrupt_ids"] == ["i-2", "i-3"]


# --------------------------------------------------------------------------- #
# Interrupts as recorded
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("interrupt", [APPROVAL, EMAIL_EDIT, *PARALLEL, FORM])
def test_spec_interrupts_have_no_problems(interrupt):
    assert interrupt_problems(interrupt) == []


def codes(interrupt: Interrupt) -> list[str]:
    """The codes interrupt_problems flags, in order."""
    return [p.code for p in interrupt_problems(interrupt)]


def test_tool_call_without_tool_call_id_flagged():
    assert codes(Interrupt(id="x", reason="tool_call")) == ["MISSING_TOOL_CALL_ID"]
    assert codes(Interrupt(id="x", reason="tool_call", toolCallId="")) == ["MISSING_TOOL_CALL_ID"]
    assert codes(Interrupt(id="x", reason="confirmation")) == []


def test_reserved_reason_flagged_but_namespaced_custom_reasons_are_fine():
    assert codes(Interrupt(id="x", reason="core:future")) == ["RESERVED_REASON"]
    assert codes(Interrupt(id="x", reason="langgraph:database_modification")) == []
    assert codes(Interrupt(id="x", reason="whatever")) == []


def test_bad_expiry_and_schema_flagged_with_interrupt_id():
    problems = interrupt_problems(
        Interrupt(id="x", reason="input_required", expiresAt="soon", responseSchema={"type": 12})
    )
    assert [p.code for p in problems] == ["INVALID_EXPIRY", "INVALID_SCHEMA"]
    assert all(p.details["interrupt_id"] == "x" for p in problems)


def test_reserved_metadata_key_flagged_on_interrupt():
    assert codes(Interrupt(id="x", reason="confirmation", metadata={"ag-ui": {}})) == ["RESERVED_METADATA_KEY"]
    bad = Interrupt.model_construct(id="x", reason="confirmation", metadata=["a"])
    assert codes(bad) == ["INVALID_METADATA"]


def test_empty_id_flagged():
    assert codes(Interrupt(id="", reason="confirmation")) == ["EMPTY_INTERRUPT_ID"]


def test_outcome_problems_flags_duplicate_ids_once():
    dup = Interrupt(id="i-1", reason="confirmation")
    problems = outcome_problems([*PARALLEL, dup, dup])
    assert [(p.code, p.details["interrupt_id"]) for p in problems] == [("DUPLICATE_INTERRUPT_ID", "i-1")]
    assert outcome_problems(PARALLEL) == []


def test_gate_freezes_lists():
    gate = ThreadGate("thread-3", "run-20", list(PARALLEL), [entry("i-1", "cancelled")])
    assert isinstance(gate.open_interrupts, tuple) and isinstance(gate.last_resume, tuple)
    with pytest.raises(AttributeError):
        gate.thread_id = "other"  # type: ignore[misc]
