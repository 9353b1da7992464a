"""The continuation a TanStack AI generic interrupt needs on its resume entry (protocol.dialects.tanstack).

The interrupt below is one `@tanstack/ai` 0.58.0 raised (tests/external/tanstack,
``/review/``), as Countersign stores it; tests/e2e/test_tanstack.py checks the
same function against TanStack's own client code on live interrupts.
"""

import copy

import pytest

from interrupts.protocol import dialects
from interrupts.protocol.dialects import tanstack

ID = "interrupt-1796138576924-d85syvc"
RAISED = {
    "id": ID,
    "reason": "review-required",
    "message": "Refund 42 EUR on order A-1001?",
    "responseSchema": {"additionalProperties": False, "properties": {"approved": {"type": "boolean"}},
                       "required": ["approved"], "type": "object"},
    "metadata": {
        "tanstack:interruptBinding": {
            "v": 1, "kind": "generic", "interruptId": ID,
            "responseSchemaHash": "sha256:687d843696b0baec6189af09d735ff790a24cc9b6643573d912a618b6e2c18d1",
            "definitionId": "review-refund", "key": "refund-A-1001", "batchIndex": 0,
            "payloadSchemaHash": "sha256:5b760bb2734fb198897ba43bfed3314b2df0d591a285d454849a70361b2aaced",
            "interruptedRunId": "r1", "generation": 0,
        },
        "tanstack:interruptPayload": {"amount": 42, "currency": "EUR", "order": "A-1001"},
    },
}
CONTINUATION = {
    "v": 1, "definitionId": "review-refund", "key": "refund-A-1001", "batchIndex": 0,
    "reason": "review-required", "message": "Refund 42 EUR on order A-1001?",
    "responseSchemaHash": "sha256:687d843696b0baec6189af09d735ff790a24cc9b6643573d912a618b6e2c18d1",
    "payloadSchemaHash": "sha256:5b760bb2734fb198897ba43bfed3314b2df0d591a285d454849a70361b2aaced",
    "payload": {"amount": 42, "currency": "EUR", "order": "A-1001"},
}


def raised(**binding) -> dict:
    """RAISED with its binding's fields replaced (a value of ... removes the field)."""
    interrupt = copy.deepcopy(RAISED)
    bound = interrupt["metadata"]["tanstack:interruptBinding"]
    for name, value in binding.items():
        if value is ...:
            bound.pop(name, None)
        else:
            bound[name] = value
    return interrupt


def continuation(interrupt: dict, status: str = "resolved", payload=None) -> dict | None:
    return dialects.entry_metadata(interrupt, status, payload).get("tanstack:interruptContinuation")


def test_a_generic_interrupt_gets_its_request_back_as_tanstacks_client_builds_it():
    assert dialects.entry_metadata(RAISED, "resolved", {"approved": True}) == {
        "tanstack:interruptContinuation": CONTINUATION}


def test_the_answer_does_not_change_it_a_cancelled_interrupt_is_still_one_of_the_batch():
    assert continuation(RAISED, "cancelled", None) == continuation(RAISED, "resolved", {"approved": False}) \
        == CONTINUATION


def test_optional_fields_follow_the_interrupt_and_the_binding():
    interrupt = raised(responseSchemaHash=..., payloadSchemaHash=..., v=...)  # no v: the current version
    del interrupt["metadata"]["tanstack:interruptPayload"]
    del interrupt["message"]
    interrupt["expiresAt"] = "2026-12-01T16:00:00.000Z"
    assert continuation(interrupt) == {"v": 1, "definitionId": "review-refund", "key": "refund-A-1001",
                                       "batchIndex": 0, "reason": "review-required", "message": "",
                                       "expiresAt": "2026-12-01T16:00:00.000Z"}


def test_a_payload_of_null_is_still_the_payload():
    interrupt = copy.deepcopy(RAISED)
    interrupt["metadata"]["tanstack:interruptPayload"] = None
    assert continuation(interrupt)["payload"] is None


def test_a_batch_index_is_a_javascript_integer():
    assert continuation(raised(batchIndex=3.0))["batchIndex"] == 3
    assert type(continuation(raised(batchIndex=3.0))["batchIndex"]) is int
    assert continuation(raised(batchIndex=tanstack.MAX_BATCH_INDEX))["batchIndex"] == tanstack.MAX_BATCH_INDEX


def test_a_field_of_another_type_is_absent_as_to_tanstack():
    # TanStack's stringField reads a non-string as no value: the hash is left out, the rest stands.
    assert "payloadSchemaHash" not in continuation(raised(payloadSchemaHash=7))
    assert "payloadSchemaHash" not in continuation(raised(payloadSchemaHash=""))


@pytest.mark.parametrize("interrupt", [
    {"id": "x", "reason": "r"},                                           # plain AG-UI: nothing to add
    {"id": "x", "reason": "r", "metadata": {"langgraph": {"raw": {}}}},   # another framework's
    {"id": "x", "reason": "r", "metadata": ["tanstack:interruptBinding"]},
    {"id": "x", "reason": "r", "metadata": {"tanstack:interruptBinding": "generic"}},
    {"id": "x", "reason": "r", "metadata": {"tanstack:interruptBinding": [1, 2]}},
    "not an interrupt", None, [],
], ids=repr)
def test_an_interrupt_without_a_binding_gets_nothing(interrupt):
    assert dialects.entry_metadata(interrupt, "resolved", {}) == {}


@pytest.mark.parametrize("change", [
    {"interruptId": "another"},            # bound to another interrupt
    {"interruptId": ...},
    {"interruptId": 1},
    {"v": 2}, {"v": "1"}, {"v": True}, {"v": None}, {"v": float("nan")},
    {"kind": "tool-approval"},             # TanStack rebuilds these from the messages
    {"kind": "client-tool-execution"}, {"kind": ...},
    {"definitionId": ...}, {"definitionId": ""}, {"definitionId": 5},
    {"key": ...}, {"key": ""}, {"key": ["k"]},
    {"batchIndex": ...}, {"batchIndex": -1}, {"batchIndex": 1.5}, {"batchIndex": "0"}, {"batchIndex": True},
    {"batchIndex": None}, {"batchIndex": float("inf")}, {"batchIndex": float("nan")},
    {"batchIndex": tanstack.MAX_BATCH_INDEX + 1}, {"batchIndex": 10**400},
    {"responseSchemaHash": ""},            # an empty hash is no binding at all
    {"expiresAt": "whenever"},             # a binding expiry nobody can read
], ids=repr)
def test_a_binding_tanstack_would_not_read_gets_nothing(change):
    assert dialects.entry_metadata(raised(**change), "resolved", {"approved": True}) == {}


def test_a_binding_with_a_readable_expiry_is_kept():
    assert continuation(raised(expiresAt="2026-12-01T16:00:00Z")) == CONTINUATION


@pytest.mark.parametrize("field", ["definitionId", "key", "responseSchemaHash", "payloadSchemaHash"])
def test_binding_texts_are_bounded(field):
    assert continuation(raised(**{field: "x" * tanstack.MAX_BINDING_CHARS})) is not None
    assert continuation(raised(**{field: "x" * (tanstack.MAX_BINDING_CHARS + 1)})) is None


def test_an_oversized_binding_expiry_is_not_parsed():
    assert continuation(raised(expiresAt="2026-12-01T16:00:00Z" + " " * tanstack.MAX_BINDING_CHARS)) is None


def test_an_oversized_interrupt_id_gets_nothing():
    long_id = "i" * (tanstack.MAX_BINDING_CHARS + 1)
    interrupt = raised(interruptId=long_id)
    interrupt["id"] = long_id
    assert continuation(interrupt) is None


def test_the_payload_is_bounded_and_must_be_json():
    interrupt = copy.deepcopy(RAISED)
    # Exactly the limit, as UTF-8 JSON: '"' + n bytes + '"'.
    interrupt["metadata"]["tanstack:interruptPayload"] = "é" * ((tanstack.MAX_PAYLOAD_BYTES - 2) // 2)
    assert continuation(interrupt) is not None
    interrupt["metadata"]["tanstack:interruptPayload"] = "é" * ((tanstack.MAX_PAYLOAD_BYTES - 2) // 2 + 1)
    assert continuation(interrupt) is None
    interrupt["metadata"]["tanstack:interruptPayload"] = {"n": float("nan")}
    assert continuation(interrupt) is None
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    interrupt["metadata"]["tanstack:interruptPayload"] = deep
    assert continuation(interrupt) is None


@pytest.mark.parametrize("change", [{"reason": 5}, {"reason": None}, {"message": ["m"]}])
def test_a_reason_or_message_tanstack_cannot_take_gets_nothing(change):
    interrupt = {**copy.deepcopy(RAISED), **change}
    assert continuation(interrupt) is None


def test_an_expiry_that_is_not_a_string_is_left_out():
    interrupt = {**copy.deepcopy(RAISED), "expiresAt": None}
    assert continuation(interrupt) == CONTINUATION


def test_only_the_fields_tanstack_reads_are_echoed():
    interrupt = raised(extra="x" * 10_000, interruptedRunId="r1", generation=0, threadId="t")
    assert continuation(interrupt) == CONTINUATION


def test_the_entry_shares_nothing_with_the_stored_interrupt():
    interrupt = copy.deepcopy(RAISED)
    continuation(interrupt)["payload"]["amount"] = 1
    assert interrupt == RAISED
