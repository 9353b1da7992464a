"""The jsonschema adaptation, isolated: a draft 2020-12 validator that fetches nothing, runs patterns on RE2
and spends a budget of steps.

Keyword code copied from or patching jsonschema lives only in this module:
written against jsonschema 4.26, because its keywords call Python's backtracking
``re`` and loop without bound, with no hook to change either.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import referencing
import referencing.exceptions
from jsonschema import Draft202012Validator, FormatChecker, ValidationError
from jsonschema import _keywords as _jsonschema_keywords  # for the one fallback in _unique_items
from jsonschema._utils import extras_msg, is_valid
from jsonschema.validators import extend

from .limits import CHARS_PER_STEP, DESCEND_STEPS, MAX_PATTERN_CHARS, REGEX_STEPS_PER_CHAR
from .patterns import UnsafePattern, compile_pattern, compiled
from .problems import json_pointer


def _refuse_to_retrieve(uri: str) -> referencing.Resource:
    """The registry's ``retrieve``: never fetch, whatever the URI."""
    # jsonschema's default registry fetches http(s) references with urllib
    # (an SSRF, and a hang on a slow host). Only what is inside the schema,
    # plus the metaschemas jsonschema bundles, may be resolved.
    raise referencing.exceptions.NoSuchResource(ref=uri)


NO_FETCH_REGISTRY: referencing.Registry = referencing.Registry(retrieve=_refuse_to_retrieve)


class TooCostly(Exception):
    """The validation's budget of steps is spent."""


class _Budget:
    """Steps left for one validation, and the sizes of schema values seen so far."""

    __slots__ = ("left", "sizes")

    def __init__(self, steps: int) -> None:
        self.left = steps
        # id(schema value) -> deep size, for const/enum: the schema outlives the
        # validation, so ids are stable for its duration.
        self.sizes: dict[int, int] = {}

    def charge(self, steps: int) -> None:
        """Spend *steps*, or raise ``TooCostly`` once the budget is overdrawn."""
        self.left -= steps
        if self.left < 0:
            raise TooCostly


# One budget per validation (errors_within). A ContextVar, not validator state:
# jsonschema evolves a new validator per sub-schema, and each thread gets its own.
_BUDGET: contextvars.ContextVar[_Budget] = contextvars.ContextVar("countersign_schema_budget")


def _charge(steps: int) -> None:
    """Spend *steps* of the current validation's budget."""
    _BUDGET.get().charge(steps)


def _width(value: Any) -> int:
    """How many steps reading through *value* once is worth (containers: one per member)."""
    if isinstance(value, (dict, list)):
        return len(value)
    if isinstance(value, str):
        return len(value) // CHARS_PER_STEP
    return 0


def _deep_size(value: Any) -> int:
    """Nodes in *value*, strings counted by ``CHARS_PER_STEP`` (iterative)."""
    size, stack = 0, [value]
    while stack:
        node = stack.pop()
        size += 1 + _width(node) if isinstance(node, str) else 1
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return size


def _search(pattern: str, text: str) -> bool:
    """Whether RE2 finds *pattern* anywhere in *text* (JSON Schema patterns are not anchored)."""
    _charge(1 + len(text) // CHARS_PER_STEP)
    return compiled(pattern).search(text) is not None


# Copied from jsonschema 4.26 (_keywords.py, _utils.py): they call Python's
# backtracking re.search with no hook. Only the search changes, to _search;
# the messages stay jsonschema's.


def _pattern(validator: Any, patrn: Any, instance: Any, schema: Any) -> Any:
    """``pattern`` (jsonschema._keywords.pattern) on RE2."""
    if validator.is_type(instance, "string") and not _search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(validator: Any, patternProperties: Any, instance: Any, schema: Any) -> Any:
    """``patternProperties`` (jsonschema._keywords.patternProperties) on RE2."""
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patternProperties.items():
        for k, v in instance.items():
            if _search(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _find_additional_properties(instance: Any, schema: Any) -> Any:
    """jsonschema._utils.find_additional_properties on RE2."""
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    for property in instance:
        if property not in properties:
            # jsonschema joins the patterns with "|" into one regex; searching
            # each is the same question and keeps one compiled pattern per
            # pattern in the cache (and "(?i)" flags scoped as written).
            if patterns and any(_search(p, property) for p in patterns):
                continue
            yield property


def _additional_properties(validator: Any, aP: Any, instance: Any, schema: Any) -> Any:
    """``additionalProperties`` (jsonschema._keywords.additionalProperties) on RE2."""
    if not validator.is_type(instance, "object"):
        return
    extras = set(_find_additional_properties(instance, schema))
    if validator.is_type(aP, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], aP, path=extra)
    elif not aP and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            error = f"{joined} {verb} not match any of the regexes: {patterns}"
            yield ValidationError(error)
        else:
            error = "Additional properties are not allowed (%s %s unexpected)"
            yield ValidationError(error % extras_msg(sorted(extras, key=str)))


def _find_evaluated_property_keys_by_schema(validator: Any, instance: Any, schema: Any) -> list:
    """jsonschema._utils.find_evaluated_property_keys_by_schema on RE2, and charged:
    it recurses through $ref/allOf/... by itself, not through keyword functions.
    """
    if validator.is_type(schema, "boolean"):
        return []
    _charge(1 + len(schema))
    evaluated_keys: list = []

    for keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(keyword)
        if ref is not None:
            resolved = validator._resolver.lookup(ref)
            evaluated_keys.extend(
                _find_evaluated_property_keys_by_schema(
                    validator.evolve(schema=resolved.contents, _resolver=resolved.resolver),
                    instance,
                    resolved.contents,
                ),
            )

    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        evaluated_keys += properties.keys() & instance.keys()

    for keyword in ["additionalProperties", "unevaluatedProperties"]:
        if (subschema := schema.get(keyword)) is None:
            continue
        evaluated_keys += (key for key, value in instance.items() if is_valid(validator.descend(value, subschema)))

    if "patternProperties" in schema:
        for property in instance:
            for pattern in schema["patternProperties"]:
                if _search(pattern, property):
                    evaluated_keys.append(property)

    if "dependentSchemas" in schema:
        for property, subschema in schema["dependentSchemas"].items():
            if property not in instance:
                continue
            evaluated_keys += _find_evaluated_property_keys_by_schema(validator, instance, subschema)

    for keyword in ["allOf", "oneOf", "anyOf"]:
        for subschema in schema.get(keyword, []):
            if not is_valid(validator.descend(instance, subschema)):
                continue
            evaluated_keys += _find_evaluated_property_keys_by_schema(validator, instance, subschema)

    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            evaluated_keys += _find_evaluated_property_keys_by_schema(validator, instance, schema["if"])
            if "then" in schema:
                evaluated_keys += _find_evaluated_property_keys_by_schema(validator, instance, schema["then"])
        elif "else" in schema:
            evaluated_keys += _find_evaluated_property_keys_by_schema(validator, instance, schema["else"])

    return evaluated_keys


def _unevaluated_properties(validator: Any, unevaluatedProperties: Any, instance: Any, schema: Any) -> Any:
    """``unevaluatedProperties`` (jsonschema._keywords.unevaluatedProperties) on RE2."""
    if not validator.is_type(instance, "object"):
        return
    evaluated_keys = _find_evaluated_property_keys_by_schema(validator, instance, schema)
    unevaluated_keys = []
    for property in instance:
        if property not in evaluated_keys:
            for _ in validator.descend(instance[property], unevaluatedProperties, path=property, schema_path=property):
                unevaluated_keys.append(property)  # noqa: PERF401

    if unevaluated_keys:
        if unevaluatedProperties is False:
            error = "Unevaluated properties are not allowed (%s %s unexpected)"
            extras = sorted(unevaluated_keys, key=str)
            yield ValidationError(error % extras_msg(extras))
        else:
            error = "Unevaluated properties are not valid under the given schema (%s %s unevaluated and invalid)"
            yield ValidationError(error % extras_msg(unevaluated_keys))


def _hashable(value: Any) -> Any:
    """A hashable stand-in for a JSON value, equal when jsonschema's ``equal`` is (1 == 1.0, True != 1)."""
    _charge(1 + (len(value) // CHARS_PER_STEP if isinstance(value, str) else 0))
    if value is True or value is False:
        return ("bool", value)
    if value is None:
        return ("null",)
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, (int, float)):
        return ("num", value)  # hash(1) == hash(1.0), as equality needs
    if isinstance(value, Mapping):
        return ("obj", frozenset((key, _hashable(item)) for key, item in value.items()))
    if isinstance(value, Sequence):
        return ("arr", tuple(_hashable(item) for item in value))
    raise TypeError(type(value).__name__)


def _unique_items(validator: Any, uI: Any, instance: Any, schema: Any) -> Any:
    """``uniqueItems`` in one pass over hashed items, where jsonschema's ``uniq`` may compare every pair."""
    if not (uI and validator.is_type(instance, "array")):
        return
    try:
        seen = set()
        for item in instance:
            key = _hashable(item)
            if key in seen:
                yield ValidationError(f"{instance!r} has non-unique elements")
                return
            seen.add(key)
    except TypeError:
        # Not JSON (never from the wire): jsonschema's own check, charged as
        # the pairwise comparison it may be.
        _charge(len(instance) ** 2 // 16)
        yield from _jsonschema_keywords.uniqueItems(validator, uI, instance, schema)


# Keywords that read through the instance (its items, properties or
# characters) once per call, beyond what their descends are charged.
_READS_INSTANCE = frozenset({
    "items", "prefixItems", "contains", "unevaluatedItems", "unevaluatedProperties", "propertyNames",
    "additionalProperties", "patternProperties", "format", "uniqueItems",
})


def _metered(name: str, keyword: Any) -> Any:
    """*keyword* charging its cost before it runs."""
    reads_instance = name in _READS_INSTANCE
    deep = name in ("const", "enum")

    def metered(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _BUDGET.get()
        # One step for the call, one per member of a list/dict value it loops
        # over (properties, required, allOf, ...), one per member of the
        # instance when it loops over that too. const/enum compare the instance
        # with their whole value: charge its deep size (memoised per value).
        cost = 1 + _width(value)
        if reads_instance:
            cost += _width(instance)
        if deep:
            size = budget.sizes.get(id(value))
            if size is None:
                size = budget.sizes[id(value)] = _deep_size(value)
            cost += size
        budget.charge(cost)
        return keyword(validator, value, instance, schema)

    metered.__name__ = metered.__qualname__ = f"metered_{name}"
    return metered


_OWN_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "unevaluatedProperties": _unevaluated_properties,
    "uniqueItems": _unique_items,
}

BoundedValidator: Any = extend(
    Draft202012Validator,
    {
        name: _metered(name, _OWN_KEYWORDS.get(name, keyword))
        for name, keyword in Draft202012Validator.VALIDATORS.items()
    },
)

_EVOLVE_FIELDS = [(field.name, field.alias) for field in attrs.fields(BoundedValidator) if field.init]


def _evolve(self: Any, **changes: Any) -> Any:
    """``evolve`` that always stays a ``BoundedValidator``, whatever a sub-schema's ``$schema`` says."""
    # jsonschema's picks the class from "$schema": a draft-07 one anywhere would
    # switch to the stock validator, with Python's re and no budget.
    changes.setdefault("schema", self.schema)
    for attr_name, init_name in _EVOLVE_FIELDS:
        if init_name not in changes:
            changes[init_name] = getattr(self, attr_name)
    return BoundedValidator(**changes)


BoundedValidator.evolve = _evolve

_stock_descend = BoundedValidator.descend


def _descend(self: Any, instance: Any, schema: Any, *args: Any, **kwargs: Any) -> Any:
    """``descend`` charging ``DESCEND_STEPS`` first, so a step is worth about the same time whatever the shape."""
    _charge(DESCEND_STEPS)
    for error in _stock_descend(self, instance, schema, *args, **kwargs):
        # Re-pathing an error costs about a keyword: uncharged, a doubling $ref
        # chain failing at its bottom ran ~17 times its budget.
        _charge(1)
        yield error


BoundedValidator.descend = _descend


def _is_regex(instance: Any) -> bool:
    """The ``regex`` format, decided by RE2: jsonschema's ``re.compile`` is not linear."""
    # Not cached: answers are anyone's text, and each compiled pattern holds memory.
    if not isinstance(instance, str):
        return True
    budget = _BUDGET.get(None)  # None in the metaschema check: the scan bounds the agent's patterns there
    if budget is not None:
        budget.charge(min(len(instance), MAX_PATTERN_CHARS + 1) * REGEX_STEPS_PER_CHAR)
    try:
        compile_pattern(instance)
    except UnsafePattern:
        return False
    return True


#: jsonschema's draft 2020-12 format checks, with ``regex`` by RE2 (``_is_regex``):
#: for answers, and for the metaschema check of the agent's own patterns.
FORMAT_CHECKER = FormatChecker(formats=())
FORMAT_CHECKER.checkers = {**Draft202012Validator.FORMAT_CHECKER.checkers, "regex": (_is_regex, ())}


def errors_within(schema: Any, payload: Any, steps: int) -> list[dict[str, str]]:
    """Every error of *payload* against *schema*, or ``TooCostly`` past *steps* steps."""
    token = _BUDGET.set(_Budget(steps))
    try:
        validator = BoundedValidator(schema, format_checker=FORMAT_CHECKER, registry=NO_FETCH_REGISTRY)
        # Errors are produced lazily: unresolvable $refs and the budget surface
        # only while iterating, which is why the whole iteration sits in the caller's try.
        errors = validator.iter_errors(payload)
        return [{"path": json_pointer(err.absolute_path), "message": err.message} for err in errors]
    finally:
        _BUDGET.reset(token)


