"""A framework client's copy of what Countersign writes on a resume entry (``contract.echoes``), alone."""

import copy

import pytest

from interrupts.protocol import dialects
from interrupts.protocol.contract.echoes import without_echoes
from interrupts.protocol.errors import ContractViolation

KEY = "tanstack:interruptContinuation"
RAW = {
    "id": "int-ts", "reason": "review-required", "message": "Refund 42 EUR?",
    "metadata": {
        "tanstack:interruptBinding": {"v": 1, "kind": "generic", "interruptId": "int-ts",
                                      "definitionId": "review-refund",
                                      "key": "refund-A-1001", "batchIndex": 0, "interruptedRunId": "r1",
                                      "generation": 1, "responseSchemaHash": "sha256:" + "a" * 64},
        "tanstack:interruptPayload": {"order": "A-1001", "amount": 42},
    },
}
BUILT = dialects.entry_metadata(RAW, "resolved", {"approved": True})[KEY]


def test_a_continuation_equal_to_countersign_s_is_taken_out_and_the_rest_kept():
    sent = {KEY: copy.deepcopy(BUILT), "client": "web"}
    assert without_echoes(RAW, "resolved", {"approved": True}, sent) == {"client": "web"}
    assert without_echoes(RAW, "cancelled", None, {KEY: copy.deepcopy(BUILT)}) == {}


@pytest.mark.parametrize("metadata", [None, {}, {"note": 1}, ["not", "an", "object"]])
def test_metadata_without_a_framework_key_is_left_as_it_is(metadata):
    assert without_echoes(RAW, "resolved", {"approved": True}, metadata) == metadata


@pytest.mark.parametrize("change, words", [
    ({"definitionId": "wire-money"}, "definitionId is different"),
    ({"batchIndex": True}, "batchIndex is different"),  # JSON, not Python: true is not 0
    ({"payload": {"order": "A-1001", "amount": 4200}}, "payload.amount is different"),
    ({"extra": 1}, "extra is not one Countersign writes"),
])
def test_a_continuation_that_differs_is_refused_saying_what_differs(change, words):
    sent = {**copy.deepcopy(BUILT), **change}
    with pytest.raises(ContractViolation) as refused:
        without_echoes(RAW, "resolved", {"approved": True}, {KEY: sent})
    assert refused.value.code == "RESERVED_METADATA_DIFFERS"
    assert words in refused.value.message, refused.value.message
    assert refused.value.details == {"interrupt_id": "int-ts", "key": KEY}
    assert "42" not in refused.value.message  # which field, never the interrupt's data


def test_a_missing_field_is_named():
    sent = {k: v for k, v in BUILT.items() if k != "key"}
    with pytest.raises(ContractViolation) as refused:
        without_echoes(RAW, "resolved", {"approved": True}, {KEY: sent})
    assert "key is missing" in refused.value.message


def test_a_continuation_for_an_interrupt_countersign_builds_none_for_is_refused():
    plain = {"id": "int-plain", "reason": "confirmation"}
    with pytest.raises(ContractViolation) as refused:
        without_echoes(plain, "resolved", None, {KEY: copy.deepcopy(BUILT)})
    assert refused.value.code == "RESERVED_METADATA_DIFFERS"
    assert "nothing to write there" in refused.value.message


def test_every_key_a_dialect_writes_is_checked():
    # The rule is the dialects' set, not TanStack's name: each key entry_metadata may write.
    assert KEY in dialects.RESERVED_METADATA_KEYS
    for key in dialects.RESERVED_METADATA_KEYS:
        with pytest.raises(ContractViolation):
            without_echoes({"id": "x", "reason": "r"}, "resolved", None, {key: {}})
