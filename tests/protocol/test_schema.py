"""responseSchema handling: schema checks, payload validation, approve-with-edits.

Schemas are the ones from the AG-UI "Interrupts" page examples.
"""

from __future__ import annotations

import copy

import pytest

from interrupts.protocol.errors import ContractViolation
from interrupts.protocol.schema.checks import check_schema
from interrupts.protocol.schema.edits import apply_edits, edited_args_schema, supports_edits
from interrupts.protocol.schema.payloads import payload_errors, validate_payload

# The schemas of the spec's examples (int-abc123, int-email-edit, int-form).
from ..spec_examples import APPROVAL_SCHEMA, EDIT_SCHEMA, FORM_SCHEMA

# --------------------------------------------------------------------------- #
# check_schema
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("schema", [APPROVAL_SCHEMA, EDIT_SCHEMA, FORM_SCHEMA, {}])
def test_check_schema_accepts_the_spec_examples(schema):
    check_schema(schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": 12},
        {"type": "objekt"},
        {"properties": []},
        {"required": "approved"},
        {"type": "string", "pattern": "(?<unclosed"},  # invalid regex, caught by the metaschema's format
        {"minimum": "2000"},
    ],
)
def test_check_schema_refuses_broken_schemas(schema):
    with pytest.raises(ContractViolation) as exc:
        check_schema(schema, interrupt_id="int-x")
    assert exc.value.code == "INVALID_SCHEMA"
    assert exc.value.details["interrupt_id"] == "int-x"


@pytest.mark.parametrize("schema", [None, True, False, [], "object", 12])
def test_check_schema_refuses_non_objects_without_crashing(schema):
    with pytest.raises(ContractViolation) as exc:
        check_schema(schema)
    assert exc.value.code == "INVALID_SCHEMA"
    assert "interrupt_id" not in exc.value.details


def test_check_schema_reports_where_the_schema_is_broken():
    with pytest.raises(ContractViolation) as exc:
        check_schema({"type": "object", "properties": {"year": {"type": 12}}})
    assert exc.value.details["errors"][0]["path"] == "/properties/year/type"


# --------------------------------------------------------------------------- #
# payload_errors / validate_payload
# --------------------------------------------------------------------------- #


def test_valid_payloads_have_no_errors():
    assert payload_errors(APPROVAL_SCHEMA, {"approved": True}) == []
    assert payload_errors(FORM_SCHEMA, {"quarter": "Q1", "year": 2026, "revenue": 4200000}) == []
    assert (
        payload_errors(
            EDIT_SCHEMA,
            {"approved": True, "editedArgs": {"to": "a@b.com", "subject": "Hi", "body": "Hi (revised per my note)"}},
        )
        == []
    )
    validate_payload(APPROVAL_SCHEMA, {"approved": False})  # a denial is a valid answer


def test_format_email_is_enforced():
    errors = payload_errors(EDIT_SCHEMA, {"approved": True, "editedArgs": {"to": "not-an-email"}})
    assert [e["path"] for e in errors] == ["/editedArgs/to"]
    assert "email" in errors[0]["message"]


def test_errors_are_json_pointers_sorted_by_path():
    errors = payload_errors(FORM_SCHEMA, {"year": 1999, "quarter": "Q5", "revenue": "lots"})
    assert [e["path"] for e in errors] == ["/quarter", "/revenue", "/year"]
    assert "2000" in errors[2]["message"]


def test_missing_required_property_points_at_the_object_and_names_it():
    errors = payload_errors(FORM_SCHEMA, {"quarter": "Q1", "year": 2026})
    assert errors == [{"path": "", "message": "'revenue' is a required property"}]


def test_boolean_is_not_an_integer():
    # JSON Schema "integer" must not accept true, even though True == 1 in Python.
    assert [e["path"] for e in payload_errors(FORM_SCHEMA, {"quarter": "Q1", "year": True, "revenue": 1})] == ["/year"]


def test_pointer_escapes_slash_and_tilde():
    schema = {"type": "object", "properties": {"a/b": {"type": "string"}, "c~d": {"type": "string"}}}
    paths = [e["path"] for e in payload_errors(schema, {"a/b": 1, "c~d": 2})]
    assert paths == ["/a~1b", "/c~0d"]


def test_array_indices_appear_in_paths():
    schema = {"type": "array", "items": {"type": "integer"}}
    assert [e["path"] for e in payload_errors(schema, [1, "x", 3])] == ["/1"]


def test_validate_payload_refuses_with_errors_and_a_readable_message():
    with pytest.raises(ContractViolation) as exc:
        validate_payload(FORM_SCHEMA, {"quarter": "Q1", "year": 1999, "revenue": 1}, interrupt_id="int-form")
    err = exc.value
    assert err.code == "INVALID_PAYLOAD"
    assert err.details["interrupt_id"] == "int-form"
    assert err.details["errors"] == [{"path": "/year", "message": "1999 is less than the minimum of 2000"}]
    assert "int-form" in err.message and "/year" in err.message


def test_validate_payload_summary_counts_the_errors_it_leaves_out():
    schema = {"type": "object", "properties": {k: {"type": "string"} for k in "abcde"}}
    with pytest.raises(ContractViolation) as exc:
        validate_payload(schema, {k: 1 for k in "abcde"})
    assert len(exc.value.details["errors"]) == 5
    assert "2 more problems" in exc.value.message
    assert "interrupt_id" not in exc.value.details


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/nowhere"},
        {"$ref": "#"},  # infinite recursion
    ],
)
def test_unusable_refs_are_invalid_schema_not_crashes(schema):
    with pytest.raises(ContractViolation) as exc:
        payload_errors(schema, {"approved": True}, interrupt_id="int-x")
    assert exc.value.code == "INVALID_SCHEMA"
    assert exc.value.details["interrupt_id"] == "int-x"


def test_remote_ref_is_refused_before_validation_not_fetched():
    # Refused by the static scan (tests/protocol/test_hostile_schemas.py proves nothing is fetched).
    with pytest.raises(ContractViolation) as exc:
        payload_errors({"$ref": "https://example.com/remote.json"}, {"approved": True}, interrupt_id="int-x")
    assert exc.value.code == "REMOTE_REF"
    assert exc.value.details["interrupt_id"] == "int-x"


def test_broken_schema_is_reported_by_validate_payload_as_invalid_schema():
    with pytest.raises(ContractViolation) as exc:
        validate_payload({"type": 12}, {"approved": True})
    assert exc.value.code == "INVALID_SCHEMA"


def test_resolvable_local_refs_work():
    schema = {"$defs": {"flag": {"type": "boolean"}}, "properties": {"approved": {"$ref": "#/$defs/flag"}}}
    assert payload_errors(schema, {"approved": True}) == []
    assert [e["path"] for e in payload_errors(schema, {"approved": "yes"})] == ["/approved"]


# --------------------------------------------------------------------------- #
# Approve with edits
# --------------------------------------------------------------------------- #


def test_supports_edits_is_the_edited_args_capability_signal():
    assert supports_edits(EDIT_SCHEMA) is True
    assert supports_edits(APPROVAL_SCHEMA) is False
    assert supports_edits(FORM_SCHEMA) is False
    assert supports_edits(None) is False
    assert supports_edits({"type": 12}) is False
    # Only the top-level properties count: a nested editedArgs is not the signal.
    assert supports_edits({"properties": {"inner": {"properties": {"editedArgs": {}}}}}) is False
    # A schema forbidding the key does not offer edits.
    assert supports_edits({"properties": {"editedArgs": False}}) is False
    assert supports_edits({"properties": {"editedArgs": True}}) is True


def test_edited_args_schema():
    assert edited_args_schema(EDIT_SCHEMA) == EDIT_SCHEMA["properties"]["editedArgs"]
    assert edited_args_schema(APPROVAL_SCHEMA) is None
    assert edited_args_schema({"properties": {"editedArgs": True}}) == {}
    assert edited_args_schema({"properties": "nope"}) is None


PROPOSED = {"to": "a@b.com", "subject": "Hi", "body": "Hi", "cc": ["boss@b.com"]}


def test_apply_edits_is_a_full_replacement_not_a_merge():
    proposed = copy.deepcopy(PROPOSED)
    edited = {"to": "a@b.com", "subject": "Hi", "body": "Hi (revised per my note)"}
    result = apply_edits(proposed, {"approved": True, "editedArgs": edited})
    assert result == edited
    assert "cc" not in result  # dropped by the reviewer, must not come back from the proposal
    assert proposed == PROPOSED  # proposal untouched


def test_apply_edits_empty_edits_mean_empty_args():
    assert apply_edits(copy.deepcopy(PROPOSED), {"approved": True, "editedArgs": {}}) == {}


def test_apply_edits_returns_copies():
    proposed = copy.deepcopy(PROPOSED)
    payload = {"approved": True, "editedArgs": {"cc": ["x@y.com"]}}
    result = apply_edits(proposed, payload)
    result["cc"].append("z@w.com")
    assert payload["editedArgs"]["cc"] == ["x@y.com"]

    unchanged = apply_edits(proposed, {"approved": True})
    assert unchanged == PROPOSED
    unchanged["cc"].append("z@w.com")
    assert proposed == PROPOSED


@pytest.mark.parametrize("payload", [None, {"approved": True}, {"approved": False}, True, "yes", []])
def test_apply_edits_without_edits_keeps_the_proposal(payload):
    assert apply_edits(PROPOSED, payload) == PROPOSED


@pytest.mark.parametrize("edited", [None, "to=a@b.com", ["a@b.com"], 1])
def test_apply_edits_refuses_non_object_edits(edited):
    with pytest.raises(ContractViolation) as exc:
        apply_edits(PROPOSED, {"approved": True, "editedArgs": edited}, interrupt_id="int-email-edit")
    assert exc.value.code == "INVALID_PAYLOAD"
    assert exc.value.details["interrupt_id"] == "int-email-edit"
    assert exc.value.details["errors"][0]["path"] == "/editedArgs"


# --- approval_payload ----------------------------------------------------------

from interrupts.protocol.schema.edits import approval_payload  # noqa: E402


@pytest.mark.parametrize(
    "schema, approved, expected",
    [
        (None, True, {"approved": True}),
        ({"type": "object", "properties": {"approved": {"type": "boolean"}, "editedArgs": {"type": "object"}},
          "required": ["approved"]}, False, {"approved": False}),
        ({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}, True,
         {"confirm": True}),
        ({"type": "boolean"}, False, False),
        ({"type": "object", "properties": {"quarter": {"type": "string"}}, "required": ["quarter"]}, True, None),
        ({"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "boolean"}},
          "required": ["a", "b"]}, True, None),
        ({"type": "string"}, True, None),
    ],
)
def test_approval_payload_finds_the_yes_no_field(schema, approved, expected):
    assert approval_payload(schema, approved) == expected
