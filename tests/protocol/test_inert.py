"""The allow-list between an agent's responseSchema and json-editor (interrupts/protocol/inert.py)."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interrupts.protocol.inert import MAX_DEPTH, MAX_NODES, inert_schema

HANDLER = "window.__pwned=1"


def test_a_plain_form_schema_passes_unchanged():
    schema = {
        "type": "object", "title": "Filing", "description": "Which quarter?",
        "properties": {
            "quarter": {"type": "string", "enum": ["Q1", "Q2", "Q3", "Q4"], "default": "Q1"},
            "to": {"type": "string", "format": "email", "minLength": 3, "maxLength": 200},
            "count": {"type": "integer", "minimum": 0, "exclusiveMaximum": 10, "multipleOf": 2},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True},
            "mode": {"const": "fast"},
            "when": {"type": ["string", "null"], "format": "date", "examples": ["2026-01-01"]},
        },
        "required": ["quarter"], "additionalProperties": False, "minProperties": 1,
    }
    assert inert_schema(schema) == schema


def test_renderer_keywords_are_dropped_at_every_level():
    evil = {"autofocus": "", "onfocus": HANDLER}
    schema = {
        "type": "object", "options": {"inputAttributes": evil}, "headerTemplate": "{{ self }}",
        "links": [{"href": "javascript:" + HANDLER, "rel": "x"}], "media": {"type": "text/html"},
        "propertyOrder": 1, "template": "{{x}}", "watch": {"x": "y"}, "$id": "urn:evil", "id": "urn:evil",
        "properties": {"note": {
            "type": "string", "options": {"inputAttributes": evil, "containerAttributes": evil},
            "enumSource": [{"source": "x", "title": "{{item}}"}], "readOnly": True, "x-unknown": 1,
            "format": "html",
        }},
        "items": {"type": "string", "links": [{"href": "javascript:1"}]},
    }
    reduced = inert_schema(schema)
    assert reduced == {"type": "object", "properties": {"note": {"type": "string"}}, "items": {"type": "string"}}
    assert "onfocus" not in json.dumps(reduced) and "javascript" not in json.dumps(reduced)


def test_annotation_values_stay_json_data_and_text_stays_text():
    markup = "<img src=x onerror=alert(1)>"
    schema = {"type": "object", "title": markup, "description": markup,
              "properties": {markup: {"type": "string", "enum": [markup, 1, None], "examples": [markup, 2.5],
                                      "default": markup}}}
    # Nothing is escaped or stripped here: the page shows these as text (data attributes, cleanText).
    assert inert_schema(schema) == schema


@pytest.mark.parametrize("keyword, value", [
    ("enum", [{"<button formaction='/interrupts/1/decide/'>Submit</button>": 1}]),
    ("enum", ["a", ["b"]]),
    ("const", {"<b>k</b>": 1}),
    ("examples", [{"k": 1}]),
    ("default", {"<b>k</b>": "v"}),
    ("default", ["a"]),
])
def test_object_and_array_annotation_values_never_reach_the_page(keyword, value):
    # json-editor's enum editor wrote an object value's keys into innerHTML: a hostile agent's
    # enum put a working <button formaction> in the form, and Enter in any field pressed it.
    schema = {
        "type": "object",
        "properties": {"choice": {"type": "object", keyword: value}, "note": {"type": "string"}},
    }
    assert inert_schema(schema) == {"type": "object", "properties": {"choice": {"type": "object"},
                                                                     "note": {"type": "string"}}}


def test_the_original_is_neither_changed_nor_shared():
    schema = {"type": "object", "properties": {"a": {"type": "string", "enum": ["x", "y"]}},
              "options": {"inputAttributes": {"onfocus": HANDLER}}}
    before = copy.deepcopy(schema)
    reduced = inert_schema(schema)
    assert schema == before
    reduced["properties"]["a"]["enum"].append("z")
    assert schema == before


def test_values_of_the_wrong_kind_are_dropped():
    schema = {"type": "wat", "title": 7, "minimum": "0", "maxLength": -1, "minItems": True, "multipleOf": 0,
              "uniqueItems": "yes", "required": "a", "enum": "a", "format": 3, "properties": [1],
              "items": "x", "oneOf": {}, "exclusiveMinimum": float("nan"), "maximum": float("inf")}
    assert inert_schema(schema) == {}
    assert inert_schema({"type": ["string", "wat", "string"]}) == {"type": ["string"]}
    assert inert_schema({"default": float("nan")}) == {}
    assert inert_schema({"enum": ["a", float("nan")]}) == {}  # not an enum missing one of its values


def test_formats_that_pick_other_editors_are_dropped():
    for fmt in ("html", "markdown", "color", "url", "upload", "button", "info", "uuid", "ipv4", "signature"):
        assert inert_schema({"type": "string", "format": fmt}) == {"type": "string"}, fmt
    for fmt in ("email", "date", "date-time", "uri", "textarea"):
        assert inert_schema({"type": "string", "format": fmt}) == {"type": "string", "format": fmt}


def test_pattern_is_left_to_the_server():
    # A backtracking regex in the reviewer's browser would freeze the tab.
    assert inert_schema({"type": "string", "pattern": "^(a+)+$"}) == {"type": "string"}


def test_local_references_are_inlined_and_definitions_not_sent():
    schema = {"type": "object", "$defs": {"Email": {"type": "string", "format": "email", "options": {"x": 1}}},
              "definitions": {"N": {"type": "integer"}},
              "properties": {"to": {"$ref": "#/$defs/Email"}, "n": {"$ref": "#/definitions/N", "title": "N"},
                             "slash": {"$ref": "#/$defs/a~1b%20c"}},
              "required": ["to"]}
    schema["$defs"]["a/b c"] = {"type": "boolean"}
    assert inert_schema(schema) == {
        "type": "object", "required": ["to"],
        "properties": {"to": {"type": "string", "format": "email"},
                       "n": {"title": "N", "allOf": [{"type": "integer"}]},
                       "slash": {"type": "boolean"}},
    }


def test_other_references_are_dropped_never_followed():
    for ref in ("https://evil.example/schema.json", "evil.json#/a", "#anchor", "#/nowhere", "urn:x"):
        assert inert_schema({"type": "object", "properties": {"a": {"$ref": ref}}}) == {
            "type": "object", "properties": {"a": {}}}, ref


def test_recursive_references_are_cut():
    tree = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "kids": {"type": "array", "items": {"$ref": "#"}}},
    }
    reduced = inert_schema(tree)
    assert reduced["properties"]["kids"]["items"]["properties"]["kids"]["items"] == {}
    loop = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    assert inert_schema(loop) == {}


def test_references_that_multiply_are_bounded():
    # Each level uses the next twice: 2**30 subschemas if inlined naively.
    defs = {
        f"d{n}": {
            "type": "object",
            "properties": {"a": {"$ref": f"#/$defs/d{n + 1}"}, "b": {"$ref": f"#/$defs/d{n + 1}"}},
        }
        for n in range(30)
    }
    defs["d30"] = {"type": "string"}
    assert inert_schema({"$defs": defs, "$ref": "#/$defs/d0"}) is None


def test_depth_and_size_are_bounded():
    deep = {"type": "string"}
    for _ in range(MAX_DEPTH + 1):
        deep = {"type": "array", "items": deep}
    assert inert_schema(deep) is None
    wide = {"type": "object", "properties": {f"p{n}": {"oneOf": [{"type": "string"}] * 10} for n in range(400)}}
    assert 400 * 11 > MAX_NODES and inert_schema(wide) is None
    assert inert_schema({"type": "object", "properties": {f"p{n}": {} for n in range(501)}}) is None
    long_text = inert_schema({"title": "x" * 50_000, "description": "y" * 50_000})
    assert len(long_text["title"]) == len(long_text["description"]) == 10_000
    assert inert_schema({"default": ["x" * 30_000]}) == {}


def test_prefix_items_become_a_json_editor_tuple():
    schema = {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer", "options": {}}],
              "items": False}
    assert inert_schema(schema) == {"type": "array", "items": [{"type": "string"}, {"type": "integer"}],
                                    "additionalItems": False}


def test_combinators_are_reduced_too():
    schema = {"oneOf": [{"type": "string", "options": {"inputAttributes": {"onfocus": HANDLER}}}, {"type": "integer"}],
              "anyOf": [{"links": []}], "allOf": [{"title": "t"}], "not": {"type": "null"},
              "if": {}, "then": {}, "else": {}, "patternProperties": {".*": {}}}
    assert inert_schema(schema) == {"oneOf": [{"type": "string"}, {"type": "integer"}], "anyOf": [{}],
                                    "allOf": [{"title": "t"}]}


def test_prototype_keys_never_reach_the_page():
    reduced = inert_schema({"type": "object", "properties": {"__proto__": {"type": "string"}, "ok": {}},
                            "required": ["__proto__", "ok"], "default": {"__proto__": {"polluted": 1}}})
    assert reduced == {"type": "object", "properties": {"ok": {}}, "required": ["ok"]}


def test_not_an_object_gives_no_form():
    for value in (None, True, [], "schema", 3):
        assert inert_schema(value) is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "properties",
                    "items",
                    "options",
                    "links",
                    "$ref",
                    "enum",
                    "title",
                    "default",
                    "oneOf",
                    "allOf",
                    "prefixItems",
                    "required",
                    "additionalProperties",
                    "$defs",
                    "format",
                    "a",
                    "onfocus",
                ]
            )
            | st.text(max_size=5),
            inner,
            max_size=5,
        )
    ),
    max_leaves=40,
)
_ALLOWED = {"type", "title", "description", "properties", "items", "additionalItems", "required", "enum", "const",
            "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength",
            "minItems", "maxItems", "uniqueItems", "minProperties", "maxProperties", "format", "default",
            "examples", "additionalProperties", "oneOf", "anyOf", "allOf"}


def _keywords(schema, found):
    """Every keyword of every subschema (not of data values) in a reduced schema."""
    if isinstance(schema, dict):
        found |= set(schema)
        for name in ("properties",):
            for sub in (schema.get(name) or {}).values():
                _keywords(sub, found)
        for name in ("items", "additionalItems", "additionalProperties", "oneOf", "anyOf", "allOf"):
            value = schema.get(name)
            for sub in value if isinstance(value, list) else [value]:
                _keywords(sub, found)
    return found


@settings(max_examples=300)
@given(schema=_JSON)
def test_anything_reduces_to_allowed_keywords_and_valid_json(schema):
    reduced = inert_schema(schema)
    if reduced is None:
        return
    assert _keywords(reduced, set()) <= _ALLOWED
    json.loads(json.dumps(reduced, allow_nan=False))  # what json_script writes, the browser can parse
