"""Walking a hostile schema without validating anything: its size and depth, its references, its patterns."""

from __future__ import annotations

import functools
import json
from typing import Any
from urllib.parse import urldefrag, urljoin

from ..errors import ContractViolation
from .limits import MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH, MAX_SCHEMA_PATTERN_CHARS
from .patterns import UnsafePattern, compiled, unsafe_pattern
from .problems import ONLY_CANCEL, Problem, json_pointer, place, shortened


def _path_of(link: tuple | None) -> str:
    """The JSON pointer of a walk's ``(parent_link, key)`` chain."""
    # Spelled out only for what is reported, so a wide schema builds no string per node.
    parts = []
    while link is not None:
        link, key = link
        parts.append(key)
    return json_pointer(reversed(parts))


def _shape_problem(schema: Any, max_bytes: int, max_depth: int) -> Problem | None:
    """SCHEMA_TOO_LARGE when *schema* nests deeper than *max_depth* or its JSON is surely over *max_bytes*.

    Iterative, stopping at the first bound passed, so any shape costs at most
    ~*max_bytes* of work. The size is a lower bound of the compact JSON
    (escapes only add); ``canonical_json`` measures exactly afterwards.
    """
    size = 0
    stack: list[tuple[Any, int, tuple | None]] = [(schema, 1, None)]
    while stack:
        node, depth, link = stack.pop()
        if isinstance(node, dict):
            if depth > max_depth:
                return _too_deep(_path_of(link), max_depth)
            size += 1 + len(node)  # braces, and a colon or comma per member
            for key, value in node.items():
                size += len(key) + 2 if isinstance(key, str) else 1
                stack.append((value, depth + 1, (link, key)))
        elif isinstance(node, list):
            if depth > max_depth:
                return _too_deep(_path_of(link), max_depth)
            size += 1 + len(node)
            stack.extend((item, depth + 1, (link, index)) for index, item in enumerate(node))
        else:
            size += len(node) + 2 if isinstance(node, str) else 1
        if size > max_bytes:
            return _too_big(f"more than {max_bytes}", max_bytes)
    return None


def _too_deep(pointer: str, max_depth: int) -> Problem:
    return Problem(
        "SCHEMA_TOO_LARGE",
        f"The responseSchema nests deeper than the {max_depth} levels Countersign accepts "
        f"(at {place(pointer)}). {ONLY_CANCEL}",
        pointer=pointer,
        max_depth=max_depth,
    )


def _too_big(size: str, max_bytes: int) -> Problem:
    return Problem(
        "SCHEMA_TOO_LARGE",
        f"The responseSchema is {size} bytes of JSON, over the {max_bytes} Countersign accepts. {ONLY_CANCEL}",
        max_bytes=max_bytes,
    )


def canonical_json(schema: Any, max_bytes: int = MAX_SCHEMA_BYTES, max_depth: int = MAX_SCHEMA_DEPTH) -> str:
    """*schema* as compact JSON with sorted keys (the cache key of every check), or ``Problem`` raised.

    Sorted keys ignore the agent's key order; compact separators make the
    UTF-8 length the size the limit speaks of.
    """
    problem = _shape_problem(schema, max_bytes, max_depth)
    if problem is not None:
        raise problem
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # surrogatepass: a lone surrogate is a legal Python str but not strict UTF-8.
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise _too_big(str(size), max_bytes)
    return text


# Keywords whose values are data, never schemas. Every other keyword's value is
# scanned as a schema, unknown ones included: "$ref": "#/x-anything" makes
# jsonschema treat whatever it points at as one.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
# Keywords whose values map names to schemas: their keys are names, not keywords.
_MAP_KEYWORDS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_SCHEMA, _MAP, _DATA = 0, 1, 2


def _ref_target(base: str, ref: str) -> str:
    """The resource URI *ref* names from *base*, as ``referencing`` resolves it."""
    # As referencing.Resolver.lookup: a fragment-only ref stays in the current
    # resource (urljoin would drop the base of a urn: URI).
    if ref.startswith("#"):
        return base
    return urldefrag(urljoin(base, ref)).url


@functools.lru_cache(maxsize=1024)
def _scan(schema_json: str) -> tuple[Problem, ...]:
    """REMOTE_REF and UNSAFE_PATTERN problems of *schema_json* (bounded by ``canonical_json``)."""
    # Cached: the same schema comes back with every answer and every edit preview.
    schema = json.loads(schema_json)
    refs: list[tuple[str, str, str, str]] = []  # (pointer, keyword, base, ref)
    problems: list[Problem] = []
    # Where references may land: the root ("" without an $id, as in
    # referencing) and every embedded $id, added by the walk.
    resources = set() if isinstance(schema.get("$id"), str) else {""}
    # (node, kind, base URI, path link): iterative, the width is not bounded.
    stack: list[tuple[Any, int, str, tuple | None]] = [(schema, _SCHEMA, "", None)]
    pattern_chars = 0
    while stack:
        node, kind, base, link = stack.pop()
        if isinstance(node, list):
            child_kind = _DATA if kind == _DATA else _SCHEMA
            stack.extend((item, child_kind, base, (link, i)) for i, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        if kind == _DATA:
            stack.extend((v, _DATA, base, (link, k)) for k, v in node.items())
            continue
        if kind == _MAP:
            stack.extend((v, _SCHEMA, base, (link, k)) for k, v in node.items())
            continue
        if isinstance(node.get("$id"), str):
            try:
                base = urljoin(base, node["$id"])
            except ValueError:  # e.g. "http://[::1": no resource anyone could reach
                pass
            else:
                resources.add(urldefrag(base).url)
        for keyword in ("$ref", "$dynamicRef"):
            if isinstance(node.get(keyword), str):
                refs.append((_path_of((link, keyword)), keyword, base, node[keyword]))
        if isinstance(node.get("pattern"), str):
            pattern_chars = _check_pattern(node["pattern"], _path_of((link, "pattern")), problems, pattern_chars)
        if isinstance(node.get("patternProperties"), dict):
            holder = (link, "patternProperties")
            for key in node["patternProperties"]:
                pattern_chars = _check_pattern(key, _path_of((holder, key)), problems, pattern_chars)
        for key, value in node.items():
            if isinstance(value, (dict, list)):
                child_kind = _DATA if key in _DATA_KEYWORDS else _MAP if key in _MAP_KEYWORDS else _SCHEMA
                stack.append((value, child_kind, base, (link, key)))
    # References last: every embedded $id must be known before one is judged.
    remote = []
    for pointer, keyword, base, ref in refs:
        try:
            target = _ref_target(base, ref)
        except ValueError:
            target = None
        if target not in resources:
            remote.append(_remote_ref(keyword, ref, pointer, target))
    return tuple(remote + problems)


def _check_pattern(pattern: str, pointer: str, problems: list[Problem], seen_chars: int) -> int:
    """Append UNSAFE_PATTERN to *problems* when RE2 refuses *pattern*; the schema's pattern text so far."""
    # Past MAX_SCHEMA_PATTERN_CHARS in all, refused uncompiled: the scan's own work stays bounded.
    seen_chars += len(pattern)
    if seen_chars > MAX_SCHEMA_PATTERN_CHARS:
        problems.append(unsafe_pattern(pattern, pointer, f"the schema's patterns come to more than "
                                                         f"{MAX_SCHEMA_PATTERN_CHARS} characters in all"))
        return seen_chars
    try:
        compiled(pattern)
    except UnsafePattern as exc:
        problems.append(unsafe_pattern(pattern, pointer, str(exc)))
    return seen_chars


def _remote_ref(keyword: str, ref: str, pointer: str, target: str | None) -> Problem:
    resolved = f" (it resolves to {shortened(target)!r})" if target and target != ref else ""
    return Problem(
        "REMOTE_REF",
        f"The responseSchema's {keyword} {shortened(ref)!r} at {place(pointer)} points outside the schema{resolved}. "
        "Countersign never fetches schemas: references must point inside the schema itself ($defs, or "
        f"a sub-schema with its own $id). {ONLY_CANCEL}",
        pointer=pointer,
        ref=ref,
    )


def schema_problems(
    schema: Any,
    *,
    interrupt_id: str | None = None,
    max_bytes: int = MAX_SCHEMA_BYTES,
    max_depth: int = MAX_SCHEMA_DEPTH,
) -> list[ContractViolation]:
    """What makes *schema* unsafe to validate with, found without validating anything.

    Codes, each with ``pointer`` (and ``interrupt_id`` when given):
    ``SCHEMA_TOO_LARGE`` (reported alone: nothing else is read then),
    ``REMOTE_REF`` (a ``$ref``/``$dynamicRef`` outside the schema and its
    ``$id``s: it would need a fetch, which never happens), ``UNSAFE_PATTERN``
    (a ``pattern`` or ``patternProperties`` key RE2 refuses). A non-object
    schema has none (``check_schema`` refuses it).
    """
    if not isinstance(schema, dict):
        return []
    try:
        text = canonical_json(schema, max_bytes, max_depth)
    except Problem as problem:
        return [problem.as_violation(interrupt_id)]
    return [problem.as_violation(interrupt_id) for problem in _scan(text)]
