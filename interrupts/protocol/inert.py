"""What a reviewer's browser gets of an agent's ``responseSchema``: an allow-list.

Why it is shaped so: docs/internals/protocol.md (protocol/inert.py).
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import unquote

__all__ = ["inert_schema", "args_form", "answer_start", "MAX_DEPTH", "MAX_NODES"]

#: Nesting of subschemas (after inlining references) a form may have.
MAX_DEPTH = 16
#: Subschemas in the whole reduced schema: bounds the page's size and its
#: form's, whatever the agent nests or references (a reference used twice
#: counts twice, so ``$defs`` that double at each level stop here).
MAX_NODES = 2_000
#: Properties of one object, and items of one ``enum``/``examples``/``required``.
MAX_MEMBERS = 500
#: Characters of a title or a description (longer ones are cut, not dropped).
MAX_TEXT = 10_000
#: Characters of a property name; longer ones are dropped with their subschema.
MAX_NAME = 200
#: A ``default``/``const``/``enum`` value: nesting and total members/characters.
MAX_DATA_DEPTH = 16
MAX_DATA_SIZE = 20_000

_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
# Formats json-editor draws as a plain <input>/<textarea> (and, for the
# standard ones, checks as the server does).
_FORMATS = frozenset({"email", "idn-email", "uri", "uri-reference", "iri", "iri-reference", "date", "time",
                      "date-time", "datetime-local", "duration", "regex", "json-pointer", "textarea"})
_NUMBERS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_TEXTS = ("title", "description")
_SUBSCHEMA_LISTS = ("oneOf", "anyOf", "allOf")
# Names JavaScript objects treat as more than a key (json-editor keeps one
# editor per property in a plain object).
_UNSAFE_NAMES = frozenset({"__proto__"})


class _Unbounded(Exception):
    """The schema is past a bound: no form for it."""


def inert_schema(schema: Any) -> dict[str, Any] | None:
    """The part of an agent's ``responseSchema`` a browser form may see.

    Returns a new dict built only of allow-listed keywords (see the module
    docstring), with local ``$ref``s inlined, or ``None`` when *schema* is not
    an object or the result would pass ``MAX_DEPTH``/``MAX_NODES``. Never
    raises, never mutates *schema*, and never returns any of its objects.
    """
    if not isinstance(schema, dict):
        return None
    reducer = _Reducer(schema)
    try:
        return reducer.schema(schema, depth=0)
    except (_Unbounded, RecursionError):
        return None


class _Reducer:
    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.nodes = 0
        self.expanding: list[str] = []  # local references being inlined, to cut cycles

    def schema(self, node: Any, depth: int) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES or depth > MAX_DEPTH:
            raise _Unbounded
        if isinstance(node, bool):
            return node  # true/false schemas: any value, or none
        if not isinstance(node, dict):
            return {}
        out: dict[str, Any] = {}
        self._keywords(node, out, depth)
        ref = node.get("$ref")
        if isinstance(ref, str):
            target = self._reference(ref, depth)
            if target is not None:
                if not out:
                    return target
                # 2020-12 applies $ref and its siblings together; json-editor merges allOf.
                out["allOf"] = [target, *out.get("allOf", [])]
        return out

    def _reference(self, ref: str, depth: int) -> Any:
        if not (ref == "#" or ref.startswith("#/")):
            return None  # remote, $id-relative or an anchor: never fetched, never followed
        if ref in self.expanding:
            return {}  # a cycle: stop here (any value; the server validates)
        target = _pointer(self.root, ref[1:])
        if target is None:
            return None
        self.expanding.append(ref)
        try:
            return self.schema(target, depth + 1)
        finally:
            self.expanding.pop()

    def _keywords(self, node: dict[str, Any], out: dict[str, Any], depth: int) -> None:
        kind = node.get("type")
        if isinstance(kind, str) and kind in _TYPES:
            out["type"] = kind
        elif isinstance(kind, list):
            kinds = list(dict.fromkeys(k for k in kind if isinstance(k, str) and k in _TYPES))
            if kinds:
                out["type"] = kinds
        for key in _TEXTS:
            if isinstance(node.get(key), str):
                out[key] = node[key][:MAX_TEXT]
        for key in _NUMBERS:
            if _is_number(node.get(key)):
                out[key] = node[key]
        if _is_number(node.get("multipleOf")) and node["multipleOf"] > 0:
            out["multipleOf"] = node["multipleOf"]
        for key in _COUNTS:
            value = node.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                out[key] = value
        if isinstance(node.get("uniqueItems"), bool):
            out["uniqueItems"] = node["uniqueItems"]
        if isinstance(node.get("format"), str) and node["format"] in _FORMATS:
            out["format"] = node["format"]
        # Scalars only: json-editor writes an object value's keys into
        # innerHTML unescaped (its enum editor's display), so an enum of
        # {"<button formaction=...>": 1} put a working button in the form,
        # no script needed. A form loses a prefill or a choice list; the
        # server still checks answers against the whole schema.
        for key in ("default", "const"):
            if key in node and _is_scalar(node[key]) and (value := _data(node[key])) is not _DROP:
                out[key] = value
        for key in ("enum", "examples"):
            values = node.get(key)
            if isinstance(values, list) and len(values) <= MAX_MEMBERS and all(map(_is_scalar, values)):
                kept = [_data(v) for v in values]
                if _DROP not in kept:  # an enum without one of its values would offer a wrong choice
                    out[key] = kept
        required = node.get("required")
        if isinstance(required, list):
            names = [n for n in required[:MAX_MEMBERS] if _is_name(n)]
            if names:
                out["required"] = list(dict.fromkeys(names))

        properties = node.get("properties")
        if isinstance(properties, dict):
            if len(properties) > MAX_MEMBERS:
                raise _Unbounded
            out["properties"] = {name: self.schema(sub, depth + 1)
                                 for name, sub in properties.items() if _is_name(name)}
        extra = node.get("additionalProperties")
        if isinstance(extra, (bool, dict)):
            out["additionalProperties"] = self.schema(extra, depth + 1)
        prefix = node.get("prefixItems")
        items = node.get("items")
        if isinstance(prefix, list) and prefix:
            if len(prefix) > MAX_MEMBERS:
                raise _Unbounded
            out["items"] = [self.schema(sub, depth + 1) for sub in prefix]
            if isinstance(items, (bool, dict)):
                out["additionalItems"] = self.schema(items, depth + 1)
        elif isinstance(items, (bool, dict)):
            out["items"] = self.schema(items, depth + 1)
        for key in _SUBSCHEMA_LISTS:
            subs = node.get(key)
            if isinstance(subs, list) and subs:
                if len(subs) > MAX_MEMBERS:
                    raise _Unbounded
                out[key] = [self.schema(sub, depth + 1) for sub in subs]


def _pointer(root: Any, pointer: str) -> Any:
    """The value at a JSON pointer (RFC 6901, with URI-fragment %-escapes), or ``None``."""
    node = root
    for part in pointer.split("/")[1:]:
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAME and value not in _UNSAFE_NAMES


_DROP = object()


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _data(value: Any) -> Any:
    """A fresh copy of JSON data within bounds, or ``_DROP``."""
    budget = [MAX_DATA_SIZE]

    def copy(item: Any, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0 or depth > MAX_DATA_DEPTH:
            raise _Unbounded
        if item is None or isinstance(item, bool):
            return item
        if isinstance(item, int):
            return item
        if isinstance(item, float):
            if not math.isfinite(item):
                raise _Unbounded  # NaN and Infinity are not JSON: the browser could not parse the page's data
            return item
        if isinstance(item, str):
            budget[0] -= len(item)
            if budget[0] < 0:
                raise _Unbounded
            return item
        if isinstance(item, list):
            return [copy(member, depth + 1) for member in item]
        if isinstance(item, dict):
            return {str(key): copy(member, depth + 1) for key, member in item.items() if key not in _UNSAFE_NAMES}
        raise _Unbounded  # not JSON at all

    try:
        return copy(value, 0)
    except _Unbounded:
        return _DROP


# --------------------------------------------------------------------------- #
# Forms that start from what the agent gave: edited arguments, prefilled answers
# --------------------------------------------------------------------------- #

#: A string longer than this, or with a line break, is edited in a textarea.
LONG_TEXT = 80
#: Keywords whose subschemas let json-editor choose between shapes: a form
#: built on them could silently turn a proposed value into another shape.
_CHOOSERS = ("oneOf", "anyOf", "allOf", "not")


class _Unfit(Exception):
    """The proposed value cannot be held, unchanged, by a form."""


def args_form(response_schema: Any, proposed_args: Any) -> dict[str, Any] | None:
    """A form schema for editing a tool call's arguments field by field, or ``None`` (edit as JSON).

    Built from the inert form of the ``editedArgs`` schema (see ``inert_schema``)
    where the agent declared one, completed from the shape of *proposed_args*
    for every key it does not describe: a field per argument, labelled by its
    ``title``/``description`` or its key. Only the proposed keys get fields
    (editing starts from the proposal: a declared key it lacks is added as
    JSON). ``None`` when the proposal has a shape a form cannot give back
    unchanged: a value outside its declared type, enum or const, a choice
    between subschemas, an array of mixed shapes or of unknown items, a key
    too long to be a label, or past the module's bounds. Never raises.
    """
    if not isinstance(proposed_args, dict) or not isinstance(response_schema, dict):
        return None
    reduced = inert_schema(response_schema)
    if reduced is None:
        return None
    declared = (reduced.get("properties") or {}).get("editedArgs", {})
    if declared is True:
        declared = {}
    if not isinstance(declared, dict):
        return None
    budget = [MAX_NODES]
    try:
        return _fit(declared, proposed_args, 0, budget)
    except (_Unfit, RecursionError):
        return None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    raise _Unfit


def _fits(kind: str, declared: Any) -> bool:
    return declared == kind or (kind == "integer" and declared == "number")


def _fit(node: Any, value: Any, depth: int, budget: list[int]) -> dict[str, Any]:
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise _Unfit
    if node is True:
        node = {}
    if not isinstance(node, dict) or any(key in node for key in _CHOOSERS):
        raise _Unfit
    kind = _kind(value)
    if kind == "number" and not math.isfinite(value):
        raise _Unfit
    declared = node.get("type")
    if isinstance(declared, list):
        # json-editor draws a type switcher for a list; the proposal picks one.
        if not any(_fits(kind, d) for d in declared):
            raise _Unfit
        declared = kind if kind in declared else "number"
    elif declared is not None and not _fits(kind, declared):
        raise _Unfit
    if "enum" in node and not any(_same(value, option) for option in node["enum"]):
        raise _Unfit
    if "const" in node and not _same(value, node["const"]):
        raise _Unfit
    out = {key: item for key, item in node.items()
           if key not in ("properties", "additionalProperties", "items", "additionalItems", "required", "type")}
    out["type"] = declared or kind
    if kind == "string":
        if "format" not in out and ("\n" in value or len(value) > LONG_TEXT):
            out["format"] = "textarea"
    elif kind == "object":
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties", True)
        fields = {}
        for name, item in value.items():
            if not _is_name(name):
                raise _Unfit
            sub = properties.get(name, extra if isinstance(extra, dict) else ({} if extra is not False else None))
            if sub is None:
                raise _Unfit  # a key the schema forbids: only JSON can show it as proposed
            fields[name] = _fit(sub, item, depth + 1, budget)
        out["properties"] = fields
        required = [name for name in node.get("required", []) if name in value]
        if required:
            out["required"] = required
    elif kind == "array":
        items = node.get("items", {})
        if isinstance(items, list) or "additionalItems" in node:
            raise _Unfit  # a tuple: json-editor's tuple form cannot grow or shrink as the proposal may
        if not value and not (isinstance(items, dict) and items.get("type")):
            raise _Unfit  # nothing to learn the items' shape from
        shapes = [_fit(items, item, depth + 1, budget) for item in value]
        if any(shape != shapes[0] for shape in shapes[1:]):
            raise _Unfit  # mixed shapes: one form per item would change some
        out["items"] = shapes[0] if shapes else _fit_empty(items, depth + 1, budget)
    return out


def _fit_empty(items: dict[str, Any], depth: int, budget: list[int]) -> dict[str, Any]:
    """The declared items schema of an empty proposed array, when a form can draw it as declared."""
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH or any(key in items for key in _CHOOSERS):
        raise _Unfit
    if items.get("type") not in ("string", "number", "integer", "boolean"):
        raise _Unfit  # an object or array item would be drawn with invented empty values
    return dict(items)


def _same(value: Any, other: Any) -> bool:
    """JSON equality: ``true`` is not ``1`` (Python's ``==`` says it is); ``1`` is ``1.0``."""
    if isinstance(value, bool) or isinstance(other, bool):
        return isinstance(value, bool) and isinstance(other, bool) and value == other
    return value == other


def answer_start(form_schema: Any, *sources: Any) -> dict[str, Any] | None:
    """What an answer form starts with, taken only from what the agent gave.

    *form_schema* is an ``inert_schema`` result; each of *sources* (a tool
    call's proposed args, the interrupt's metadata, in that order) may supply
    the value of a top-level property it names, when that value is a scalar
    the property accepts (its type, enum and const). Everything else starts
    empty: no invented zeros, dates or first choices. ``default`` is not
    copied here: json-editor applies it itself. ``None`` when nothing fits.
    """
    if not isinstance(form_schema, dict) or not isinstance(form_schema.get("properties"), dict):
        return None
    start: dict[str, Any] = {}
    for name, sub in form_schema["properties"].items():
        if not isinstance(sub, dict) or "default" in sub:
            continue
        for source in sources:
            if isinstance(source, dict) and name in source and _is_scalar(source[name]) and source[name] is not None:
                try:
                    fitted = _fit({k: v for k, v in sub.items() if k != "format"}, source[name], 0, [1])
                except _Unfit:
                    continue
                if fitted.get("type") in ("string", "number", "integer", "boolean") and _within(sub, source[name]):
                    start[name] = source[name]
                    break
    return start or None


def _within(schema: dict[str, Any], value: Any) -> bool:
    """Whether a scalar meets the bounds *schema* sets on it (a value outside them would open the form invalid)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (value >= schema.get("minimum", value) and value <= schema.get("maximum", value)
                and ("exclusiveMinimum" not in schema or value > schema["exclusiveMinimum"])
                and ("exclusiveMaximum" not in schema or value < schema["exclusiveMaximum"]))
    if isinstance(value, str):
        return schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value))
    return True
