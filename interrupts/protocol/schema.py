"""An interrupt's ``responseSchema``: checking it, validating answers against it,
and the approve-with-edits pattern built on it.

The schema comes from the agent and is untrusted: every function here reports a
broken schema as ``ContractViolation("INVALID_SCHEMA")`` rather than letting a
``jsonschema`` or ``referencing`` exception escape, so one bad interrupt can
never turn a reviewer's page or a resume request into a server error.

A hostile schema is bounded work, never a way out (issue 10):

* nothing is ever fetched: references resolve only inside the schema (a
  ``referencing.Registry`` whose ``retrieve`` refuses), and ``schema_problems``
  flags any that point elsewhere (``REMOTE_REF``);
* ``pattern`` and ``patternProperties`` run on RE2, in linear time; a pattern
  RE2 refuses (backreferences, lookaround, too big) is ``UNSAFE_PATTERN``;
* a schema over ``MAX_SCHEMA_BYTES`` of JSON or nested deeper than
  ``MAX_SCHEMA_DEPTH`` is ``SCHEMA_TOO_LARGE``, checked before anything else
  reads it;
* one validation may take ``MAX_VALIDATION_STEPS`` steps, then it stops with
  ``SCHEMA_TOO_COSTLY`` (a small schema can still ask for exponential work);
  past ``FAST_VALIDATION_STEPS`` the check moves to a worker process, one at a
  time, so a costly check never holds the server's interpreter lock against
  other requests (``BUSY`` when it cannot get its turn);
* the ``regex`` format, for answers and for the metaschema check of the
  agent's own patterns, is decided by RE2 too: Python's ``re.compile`` is not
  linear.

An interrupt with any of these problems can only be cancelled: answers to it
are refused with the same code.

Validation is JSON Schema draft 2020-12 *with* format checking switched on:
``jsonschema`` treats ``format`` as an annotation unless a format checker is
passed, and the approve-with-edits example in the AG-UI spec relies on
``"format": "email"`` being enforced. Only the formats ``jsonschema`` can check
without optional dependencies are enforced (``email``, ``ipv4``, ``ipv6``,
``date``, ``regex`` (by RE2), ...); others, such as ``date-time`` without
``rfc3339-validator`` installed, are accepted unchecked.
"""

from __future__ import annotations

import contextvars
import copy
import functools
import json
import multiprocessing
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any
from urllib.parse import urldefrag, urljoin

import attrs
import re2
import referencing
import referencing.exceptions
from jsonschema import Draft202012Validator, FormatChecker, ValidationError
from jsonschema import _keywords as _jsonschema_keywords  # for the one fallback in _unique_items
from jsonschema._utils import extras_msg, is_valid
from jsonschema.exceptions import SchemaError
from jsonschema.validators import extend

from .errors import ContractViolation

__all__ = [
    "MAX_SCHEMA_BYTES",
    "MAX_SCHEMA_DEPTH",
    "MAX_VALIDATION_STEPS",
    "apply_edits",
    "check_schema",
    "check_usable_schema",
    "edited_args_schema",
    "payload_errors",
    "schema_problems",
    "supports_edits",
    "validate_payload",
]

#: The payload key the AG-UI spec names for approve-with-edits.
EDITED_ARGS = "editedArgs"

#: Largest responseSchema accepted, as compact UTF-8 JSON. The spec's examples
#: are under 1 KiB and a generous form (a hundred fields with descriptions and
#: enums) ~20 KiB. The bound is set by the metaschema check of a schema never
#: seen before, which is linear and the slowest step a schema costs: measured
#: ~2.4 ms per KiB on the 2-vCPU dev box (255 KiB took 610 ms), so 64 KiB keeps
#: it near 150 ms per new schema, and keeps every pattern, enum and const an
#: agent sends (each charged by size during validation) small.
MAX_SCHEMA_BYTES = 64 * 1024
#: Deepest nesting of JSON containers in a responseSchema (the root object is
#: level 1). Each schema level is usually two containers (``properties`` and the
#: sub-schema), so this is ~32 levels of nested objects, far beyond any form a
#: person fills in, and it keeps every recursive walk of the schema (the
#: metaschema check, ``json.dumps``) far from Python's recursion limit.
MAX_SCHEMA_DEPTH = 64
#: Steps one validation of one answer may take: one per keyword applied to a
#: value, plus one per member it loops over, plus ``_DESCEND_STEPS`` per
#: descent into a sub-schema (see ``_metered``). The spec's edit schema takes
#: 36; an answer of 1,000 objects of 10 string fields ~79,000 (55 ms). Measured
#: on the 2-vCPU dev box (bench command in the issue 10 report), the costliest
#: shapes run at ~1.1 us a step (the doubling $ref bomb: 200,000 steps took
#: 219 ms; 1,000 false anyOf branches per call: 143 ms), so 80,000 steps keep
#: the worst case near 90 ms, well under the ~150 ms a request may spend here.
MAX_VALIDATION_STEPS = 80_000
#: Longest pattern Countersign compiles, and most pattern text one schema may
#: carry. RE2 runs in linear time, but compiling is not free: a case-folded
#: Unicode class costs ~30 ms per 1,000 characters, refused or not (measured:
#: "(?i)" + "\\pL" * 333 took 33 ms), so ten interrupts of 64 KiB of distinct
#: patterns held a server 12 s. Forms need short patterns; an e-mail pattern
#: is ~300 characters.
MAX_PATTERN_CHARS = 1_000
MAX_SCHEMA_PATTERN_CHARS = 2_000
#: Budget steps a ``regex``-format answer is charged per character before RE2
#: compiles it (the same ~30 us a character): a long one is checked in the
#: worker process, not in the server's interpreter.
_REGEX_STEPS_PER_CHAR = 30
#: RE2's memory budget per compiled pattern (the DFA cache is carved out of
#: it). Enough for any pattern a form needs; a pattern that needs more is
#: refused as UNSAFE_PATTERN rather than allowed to grow.
MAX_PATTERN_MEMORY = 2 * 1024 * 1024

#: Steps every answer may take in the server's own interpreter. An answer
#: that needs more is checked again, with the full ``MAX_VALIDATION_STEPS``,
#: in a worker process (``_costly_pool``), one such check at a time. A
#: CPU-bound check on a thread of the server would hold the interpreter's
#: lock against every other request: each time another request's thread
#: waits for the database it must win the lock back, up to 5 ms a time.
#: Measured with four clients sending answers to the doubling $ref schema,
#: other threads' plain approvals took 189 ms (p50, against 29 ms alone);
#: with one check at a time on a thread, still 136 ms. 5,000 steps is ~5 ms:
#: every form a person fills in fits (the spec's edit schema takes 36).
FAST_VALIDATION_STEPS = 5_000
#: How long an answer waits for its turn in the worker before ``BUSY``.
COSTLY_WAIT_SECONDS = 10.0
_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def _costly_pool() -> ProcessPoolExecutor:
    """The worker process that runs costly checks, started on first use (spawned: no inherited threads)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return _pool


def _discard_pool(pool: ProcessPoolExecutor) -> None:
    global _pool
    with _pool_lock:
        if _pool is pool:
            _pool = None
    pool.shutdown(wait=False, cancel_futures=True)


# Steps charged for each descent into a sub-schema (see _descend).
_DESCEND_STEPS = 4

# A string instance costs one step per this many characters where a keyword
# reads it through (pattern search, format check): linear work, charged as such.
_CHARS_PER_STEP = 256

# How many errors the human summary of INVALID_PAYLOAD spells out; the full
# list is always in ``details["errors"]``.
_SUMMARY_ERRORS = 3

# Sentence every refusal of an unusable schema ends with: what happens next.
_ONLY_CANCEL = "The agent must fix the schema; the interrupt can only be cancelled meanwhile."


def _details(interrupt_id: str | None, **details: Any) -> dict[str, Any]:
    """Refusal details, with ``interrupt_id`` only when one interrupt is concerned."""
    if interrupt_id is not None:
        details["interrupt_id"] = interrupt_id
    return details


def _pointer(path: Any) -> str:
    """A JSON pointer (RFC 6901) for a ``jsonschema`` error path; ``""`` is the root."""
    # "~" and "/" must be escaped, in that order, or a key like "a/b" would
    # read back as two levels.
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def _where(pointer: str) -> str:
    """A pointer as prose: ``/a/b`` stays, ``""`` is "the top level"."""
    return pointer or "the top level"


def _short(text: str, limit: int = 80) -> str:
    """*text* cut to *limit* characters for a message (the full value is in the details)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- #
# Size and depth: checked first, by a walk that stops at the limit
# --------------------------------------------------------------------------- #


class _Problem(Exception):
    """A refusal found without an interrupt id; ``as_violation`` adds it."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.details = code, message, details

    def as_violation(self, interrupt_id: str | None) -> ContractViolation:
        """The refusal as the ``ContractViolation`` callers see."""
        return ContractViolation(self.code, self.message, **_details(interrupt_id, **self.details))


def _path_of(link: tuple | None) -> str:
    """The JSON pointer of a walk's ``(parent_link, key)`` chain."""
    # Paths are kept as parent links and only spelled out for what is reported,
    # so a wide schema does not build one string per node.
    parts = []
    while link is not None:
        link, key = link
        parts.append(key)
    return _pointer(reversed(parts))


def _shape_problem(schema: Any, max_bytes: int, max_depth: int) -> _Problem | None:
    """SCHEMA_TOO_LARGE when *schema* nests deeper than *max_depth* containers or
    its JSON is surely over *max_bytes*; ``None`` otherwise.

    Iterative, and it stops as soon as either bound is passed, so a schema of
    any shape costs at most ~*max_bytes* of work. The size counted is a lower
    bound of the compact JSON (escapes only add), exact enough to stop early;
    ``_canonical_json`` measures exactly once the depth is known to be safe.
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


def _too_deep(pointer: str, max_depth: int) -> _Problem:
    """SCHEMA_TOO_LARGE for nesting."""
    return _Problem(
        "SCHEMA_TOO_LARGE",
        f"The responseSchema nests deeper than the {max_depth} levels Countersign accepts "
        f"(at {_where(pointer)}). {_ONLY_CANCEL}",
        pointer=pointer,
        max_depth=max_depth,
    )


def _too_big(size: str, max_bytes: int) -> _Problem:
    """SCHEMA_TOO_LARGE for size."""
    return _Problem(
        "SCHEMA_TOO_LARGE",
        f"The responseSchema is {size} bytes of JSON, over the {max_bytes} Countersign accepts. {_ONLY_CANCEL}",
        max_bytes=max_bytes,
    )


def _canonical_json(schema: Any, max_bytes: int = MAX_SCHEMA_BYTES, max_depth: int = MAX_SCHEMA_DEPTH) -> str:
    """*schema* as compact JSON with sorted keys (the cache key of every check
    below), or ``_Problem("SCHEMA_TOO_LARGE")`` raised.

    Sorted keys make the key independent of the agent's key order; compact
    separators make its UTF-8 length the size the limit speaks of.
    """
    problem = _shape_problem(schema, max_bytes, max_depth)
    if problem is not None:
        raise problem
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # surrogatepass: a lone surrogate is legal in a Python str (and in JSON
    # escapes) but not encodable as strict UTF-8.
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise _too_big(str(size), max_bytes)
    return text


# --------------------------------------------------------------------------- #
# Patterns on RE2
# --------------------------------------------------------------------------- #


def _re2_options() -> re2.Options:
    """RE2 options for agent patterns: bounded memory, no logging to stderr."""
    options = re2.Options()
    options.max_mem = MAX_PATTERN_MEMORY
    # RE2 logs every refused pattern to stderr by default: an agent could fill
    # the server's logs with them.
    options.log_errors = False
    # Only "does it match" is ever asked, never groups: RE2 can then stay on
    # its fastest (DFA) path.
    options.never_capture = True
    return options


_RE2_OPTIONS = _re2_options()


def _to_re2_syntax(pattern: str) -> str:
    r"""*pattern* with ECMA-262's ``\uXXXX`` escapes spelled as RE2's ``\x{XXXX}``.

    JSON Schema patterns are ECMA-262 regular expressions, where ``\u00e9`` is
    common; RE2 (and this is the only gap that matters in practice) spells it
    ``\x{00e9}``. One linear pass; every other escape is copied untouched, so an
    escaped backslash (``\\u0041``) stays a literal.
    """
    if "\\u" not in pattern:
        return pattern
    out, i, n = [], 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\" and i + 1 < n:
            hex_digits = pattern[i + 2 : i + 6]
            if pattern[i + 1] == "u" and len(hex_digits) == 4 and all(c in "0123456789abcdefABCDEF" for c in hex_digits):
                out.append("\\x{" + hex_digits + "}")
                i += 6
            else:
                out.append(pattern[i : i + 2])
                i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


class _UnsafePattern(Exception):
    """RE2 refuses a pattern; the argument is RE2's reason."""


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    """*pattern* compiled by RE2 (cached), or ``_UnsafePattern`` raised.

    The cache matters: jsonschema applies a pattern once per value it checks,
    and ``additionalProperties`` re-reads every ``patternProperties`` key for
    every property. A refusal is not cached (lru_cache never caches
    exceptions); the static scan reports it before validation gets there.
    """
    return _compile(pattern)


def _compile(pattern: str) -> Any:
    """*pattern* compiled by RE2, uncached, or ``_UnsafePattern`` raised."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise _UnsafePattern(f"it is {len(pattern)} characters long; Countersign compiles patterns of at most "
                             f"{MAX_PATTERN_CHARS}")
    try:
        return re2.compile(_to_re2_syntax(pattern), _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "refused"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise _UnsafePattern(str(reason)) from None
    except (TypeError, ValueError) as exc:  # e.g. a lone surrogate, not encodable as UTF-8
        raise _UnsafePattern(str(exc)) from None


def _unsafe_pattern(pattern: str, pointer: str, reason: str) -> _Problem:
    """UNSAFE_PATTERN for *pattern* at *pointer* in the schema."""
    return _Problem(
        "UNSAFE_PATTERN",
        f"The responseSchema's pattern {_short(pattern)!r} at {_where(pointer)} cannot be run safely "
        f"({reason}): Countersign runs patterns with RE2, in linear time, which has no backreferences, "
        f"lookahead or lookbehind and refuses very large patterns. {_ONLY_CANCEL}",
        pointer=pointer,
        pattern=pattern,
    )


# --------------------------------------------------------------------------- #
# The static scan: references and patterns, at raise time
# --------------------------------------------------------------------------- #

# Keywords whose values are data, never schemas: nothing inside them is a
# reference or a pattern. Every other keyword's value is scanned as if it were
# a schema, unknown ones included, because a "$ref": "#/x-anything" makes
# jsonschema treat whatever it points at as one.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
# Keywords whose values map names to schemas: their keys are names, not keywords.
_MAP_KEYWORDS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
_SCHEMA, _MAP, _DATA = 0, 1, 2


def _ref_target(base: str, ref: str) -> str:
    """The resource URI *ref* names from *base*, as ``referencing`` resolves it."""
    # Same rule as referencing.Resolver.lookup: a fragment-only ref stays in the
    # current resource (urljoin would drop the base of a urn: or other
    # non-hierarchical URI).
    if ref.startswith("#"):
        return base
    return urldefrag(urljoin(base, ref)).url


@functools.lru_cache(maxsize=1024)
def _scan(schema_json: str) -> tuple[_Problem, ...]:
    """REMOTE_REF and UNSAFE_PATTERN problems of the schema *schema_json*
    (already bounded by ``_canonical_json``), in document order of discovery.

    Cached like the metaschema check: the same schema comes back with every
    answer and every edit preview.
    """
    schema = json.loads(schema_json)
    refs: list[tuple[str, str, str, str]] = []  # (pointer, keyword, base, ref)
    problems: list[_Problem] = []
    # The resources references may land in: the root (its URI is "" without an
    # $id, as in referencing) and every embedded $id, added by the walk.
    resources = set() if isinstance(schema.get("$id"), str) else {""}
    # (node, kind, base URI, path link): iterative, the depth is already bounded
    # but the width is not.
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


def _check_pattern(pattern: str, pointer: str, problems: list[_Problem], seen_chars: int) -> int:
    """Append UNSAFE_PATTERN to *problems* when RE2 refuses *pattern*; the schema's pattern text so far.

    Past ``MAX_SCHEMA_PATTERN_CHARS`` in all, patterns are refused without
    being compiled: the scan's own work stays bounded.
    """
    seen_chars += len(pattern)
    if seen_chars > MAX_SCHEMA_PATTERN_CHARS:
        problems.append(_unsafe_pattern(pattern, pointer, f"the schema's patterns come to more than "
                                                          f"{MAX_SCHEMA_PATTERN_CHARS} characters in all"))
        return seen_chars
    try:
        _compiled(pattern)
    except _UnsafePattern as exc:
        problems.append(_unsafe_pattern(pattern, pointer, str(exc)))
    return seen_chars


def _remote_ref(keyword: str, ref: str, pointer: str, target: str | None) -> _Problem:
    """REMOTE_REF for *ref* at *pointer*."""
    resolved = f" (it resolves to {_short(target)!r})" if target and target != ref else ""
    return _Problem(
        "REMOTE_REF",
        f"The responseSchema's {keyword} {_short(ref)!r} at {_where(pointer)} points outside the schema{resolved}. "
        "Countersign never fetches schemas: references must point inside the schema itself ($defs, or "
        f"a sub-schema with its own $id). {_ONLY_CANCEL}",
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

    Codes (each problem carries ``interrupt_id`` when given, and ``pointer``,
    the JSON pointer of the offending place in the schema):

    * ``SCHEMA_TOO_LARGE`` - over *max_bytes* of compact JSON or nested deeper
      than *max_depth*; reported alone, since nothing else is read then;
    * ``REMOTE_REF`` - a ``$ref``/``$dynamicRef`` whose target is not the
      schema itself or a sub-schema with its own ``$id`` (relative references
      resolved against the enclosing ``$id``s): it would need a fetch, which
      never happens;
    * ``UNSAFE_PATTERN`` - a ``pattern`` or ``patternProperties`` key RE2
      refuses (backreferences, lookaround, too big for its memory budget).

    An empty list means validation against *schema* is bounded work. A schema
    that is not an object has no such problems (``check_schema`` refuses it).
    Whether the schema is valid JSON Schema at all is ``check_schema``'s job.
    """
    if not isinstance(schema, dict):
        return []
    try:
        text = _canonical_json(schema, max_bytes, max_depth)
    except _Problem as problem:
        return [problem.as_violation(interrupt_id)]
    return [problem.as_violation(interrupt_id) for problem in _scan(text)]


# --------------------------------------------------------------------------- #
# The metaschema check
# --------------------------------------------------------------------------- #


def _is_regex(instance: Any) -> bool:
    """The ``regex`` format, decided by RE2: a pattern RE2 cannot run is not one Countersign accepts.

    jsonschema's own check is Python's ``re.compile``, which is not linear:
    a 17 KB answer of case-insensitive character classes took it 5.4 s of
    server time, charged as 66 budget steps. RE2 compiles in linear time and
    bounded memory. Not cached: answers are anyone's text, and each compiled
    pattern holds memory.
    """
    if not isinstance(instance, str):
        return True
    budget = _BUDGET.get(None)  # None in the metaschema check: the scan bounds the agent's patterns there
    if budget is not None:
        budget.charge(min(len(instance), MAX_PATTERN_CHARS + 1) * _REGEX_STEPS_PER_CHAR)
    try:
        _compile(instance)
    except _UnsafePattern:
        return False
    return True


#: jsonschema's draft 2020-12 format checks, with ``regex`` by RE2 (``_is_regex``):
#: for answers, and for the metaschema check of the agent's own patterns.
_FORMAT_CHECKER = FormatChecker(formats=())
_FORMAT_CHECKER.checkers = {**Draft202012Validator.FORMAT_CHECKER.checkers, "regex": (_is_regex, ())}


@functools.lru_cache(maxsize=1024)
def _check_against_metaschema(schema_json: str) -> None:
    # Checking against the metaschema takes ~3 ms, and the same few schemas
    # come back with every decision: remember the ones that passed (a
    # SchemaError is not cached, so a bad schema is re-checked, and cheap to).
    # The "regex" format it applies to "pattern" and to patternProperties'
    # keys is RE2's (_FORMAT_CHECKER): Python's re.compile is not linear.
    Draft202012Validator.check_schema(json.loads(schema_json), format_checker=_FORMAT_CHECKER)


def check_schema(schema: Any, *, interrupt_id: str | None = None) -> None:
    """Raise ``ContractViolation("INVALID_SCHEMA")`` unless *schema* is a usable
    JSON Schema draft 2020-12 object, or ``SCHEMA_TOO_LARGE`` when it is over
    ``MAX_SCHEMA_BYTES``/``MAX_SCHEMA_DEPTH`` (checked first, so an oversized
    schema is never read further).

    Boolean schemas (``true``/``false``), although valid JSON Schema, are
    refused: the AG-UI ``Interrupt`` model declares ``responseSchema`` as an
    object, so anything else arrived by bypassing it. References and patterns
    are ``schema_problems``' concern; ``check_usable_schema`` runs both.
    """
    if not isinstance(schema, dict):
        raise ContractViolation(
            "INVALID_SCHEMA",
            f"The responseSchema must be a JSON object, not {type(schema).__name__}; "
            "the agent must send a JSON Schema (draft 2020-12) object.",
            **_details(interrupt_id),
        )
    try:
        text = _canonical_json(schema)
        # check_schema validates against the draft 2020-12 metaschema and, by
        # default, checks formats in it too (so an invalid "pattern" regex is
        # caught here rather than crashing validation later).
        _check_against_metaschema(text)
    except _Problem as problem:
        raise problem.as_violation(interrupt_id) from None
    except SchemaError as exc:
        where = _pointer(exc.absolute_path) or "the top level"
        raise ContractViolation(
            "INVALID_SCHEMA",
            f"The responseSchema is not a valid JSON Schema (draft 2020-12) at {where}: "
            f"{exc.message}. {_ONLY_CANCEL}",
            **_details(interrupt_id, errors=[{"path": _pointer(exc.absolute_path), "message": exc.message}]),
        ) from None
    except Exception as exc:  # noqa: BLE001 - untrusted input: report, never crash
        raise ContractViolation(
            "INVALID_SCHEMA",
            f"The responseSchema could not be checked ({type(exc).__name__}: {exc}).",
            **_details(interrupt_id),
        ) from None


def check_usable_schema(schema: Any, *, interrupt_id: str | None = None) -> None:
    """Raise the first reason answers to an interrupt with *schema* must be
    refused: ``SCHEMA_TOO_LARGE``, ``REMOTE_REF`` or ``UNSAFE_PATTERN``
    (``schema_problems``), then ``INVALID_SCHEMA`` (``check_schema``). The
    scan comes first: a pattern RE2 refuses also fails the metaschema's
    ``regex`` format, and UNSAFE_PATTERN says why.

    Returns quietly when validating against *schema* is safe. Both checks are
    cached on the schema's canonical JSON, so a schema seen before costs a
    walk and a ``json.dumps``.
    """
    for problem in schema_problems(schema, interrupt_id=interrupt_id):
        raise problem
    check_schema(schema, interrupt_id=interrupt_id)


# --------------------------------------------------------------------------- #
# Validation: nothing fetched, patterns on RE2, a budget of steps
# --------------------------------------------------------------------------- #


def _refuse_to_retrieve(uri: str) -> referencing.Resource:
    """The registry's ``retrieve``: never fetch, whatever the URI."""
    # jsonschema's default registry fetches http(s) references with urllib
    # (an SSRF, and a hang on a slow host). Only what is inside the schema,
    # plus the metaschemas jsonschema bundles, may be resolved.
    raise referencing.exceptions.NoSuchResource(ref=uri)


_NO_FETCH_REGISTRY: referencing.Registry = referencing.Registry(retrieve=_refuse_to_retrieve)


class _TooCostly(Exception):
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
        """Spend *steps*, or raise ``_TooCostly`` once the budget is overdrawn."""
        self.left -= steps
        if self.left < 0:
            raise _TooCostly


# One budget per validation, set by payload_errors for its duration. A
# ContextVar rather than state on the validator: jsonschema evolves a new
# validator for every sub-schema, and each thread (request) gets its own value.
_BUDGET: contextvars.ContextVar[_Budget] = contextvars.ContextVar("countersign_schema_budget")


def _charge(steps: int) -> None:
    """Spend *steps* of the current validation's budget."""
    _BUDGET.get().charge(steps)


def _width(value: Any) -> int:
    """How many steps reading through *value* once is worth (containers: one per member)."""
    if isinstance(value, (dict, list)):
        return len(value)
    if isinstance(value, str):
        return len(value) // _CHARS_PER_STEP
    return 0


def _deep_size(value: Any) -> int:
    """Nodes in *value*, strings counted by ``_CHARS_PER_STEP`` (iterative)."""
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
    _charge(1 + len(text) // _CHARS_PER_STEP)
    return _compiled(pattern).search(text) is not None


# The four keyword functions below are jsonschema 4.26's own
# (jsonschema/_keywords.py and jsonschema/_utils.py), copied because they call
# Python's backtracking re.search directly and offer no hook: only the search
# is changed, to _search (RE2). Messages are jsonschema's, so errors read the
# same as before.


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
    """A hashable stand-in for a JSON value, equal exactly when jsonschema's
    ``equal`` says the values are (1 == 1.0, True != 1, key order ignored),
    charging one step per node.
    """
    _charge(1 + (len(value) // _CHARS_PER_STEP if isinstance(value, str) else 0))
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
    """``uniqueItems`` in linear time.

    jsonschema's ``uniq`` sorts when it can and otherwise compares every pair
    (O(n^2) ``equal`` calls: arrays of objects, or of mixed types). Hashing a
    canonical form of each item answers the same question in one pass.
    """
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

_BoundedValidator: Any = extend(
    Draft202012Validator,
    {
        name: _metered(name, _OWN_KEYWORDS.get(name, keyword))
        for name, keyword in Draft202012Validator.VALIDATORS.items()
    },
)

_EVOLVE_FIELDS = [(field.name, field.alias) for field in attrs.fields(_BoundedValidator) if field.init]


def _evolve(self: Any, **changes: Any) -> Any:
    """``evolve`` that always stays a ``_BoundedValidator``.

    jsonschema's picks the class from each sub-schema's ``$schema``: a
    ``"$schema": "http://json-schema.org/draft-07/schema#"`` anywhere in the
    agent's schema would switch to the stock Draft7Validator, with Python's re
    and no budget. Every sub-schema is validated as draft 2020-12, the dialect
    Countersign accepts.
    """
    changes.setdefault("schema", self.schema)
    for attr_name, init_name in _EVOLVE_FIELDS:
        if init_name not in changes:
            changes[init_name] = getattr(self, attr_name)
    return _BoundedValidator(**changes)


_BoundedValidator.evolve = _evolve

_stock_descend = _BoundedValidator.descend


def _descend(self: Any, instance: Any, schema: Any, *args: Any, **kwargs: Any) -> Any:
    """``descend`` charging ``_DESCEND_STEPS`` first.

    Going into a sub-schema is the costly step of validation (a new validator
    and resolver, or a ``False`` schema's error), ~4 times a plain keyword such
    as ``type``; charging it as such keeps a step worth about the same time
    whatever the schema's shape, so the budget bounds time, not just calls.
    """
    _charge(_DESCEND_STEPS)
    for error in _stock_descend(self, instance, schema, *args, **kwargs):
        # Each error carried up a level is re-pathed (jsonschema's _set and two
        # deque pushes): about a keyword's cost. Without charging it, a schema
        # that fails at the bottom of a doubling $ref chain cost ~17 times its
        # budget (16,652 steps charged, 285,327 descends run: 480 ms).
        _charge(1)
        yield error


_BoundedValidator.descend = _descend


def payload_errors(
    schema: Any,
    payload: Any,
    *,
    interrupt_id: str | None = None,
    max_steps: int = MAX_VALIDATION_STEPS,
) -> list[dict[str, str]]:
    """Every way *payload* fails *schema*, as ``{"path", "message"}`` dicts sorted
    by path (then message); an empty list means the payload is valid.

    ``path`` is a JSON pointer to the offending value in the payload (``""`` for
    the payload itself; for a missing ``required`` property it is the object
    that lacks it, and the message names the property).

    Refuses, rather than validating, when the schema cannot be used:
    ``check_usable_schema``'s codes (``SCHEMA_TOO_LARGE``, ``INVALID_SCHEMA``,
    ``REMOTE_REF``, ``UNSAFE_PATTERN``); ``INVALID_SCHEMA`` too for a ``$ref``
    that cannot be resolved or that recurses forever; and
    ``SCHEMA_TOO_COSTLY`` when checking takes more than *max_steps* steps.
    Nothing is ever fetched. Safe to call from concurrent threads: each call
    has its own budget.
    """
    check_usable_schema(schema, interrupt_id=interrupt_id)
    try:
        try:
            found = _errors_within(schema, payload, min(max_steps, FAST_VALIDATION_STEPS))
        except _TooCostly:
            if max_steps <= FAST_VALIDATION_STEPS:
                raise
            found = _costly_errors(schema, payload, max_steps, interrupt_id)
    except ContractViolation:
        raise
    except _TooCostly:
        subject = f"The answer to interrupt {interrupt_id}" if interrupt_id else "This answer"
        raise ContractViolation(
            "SCHEMA_TOO_COSTLY",
            f"{subject} needs more checking than Countersign allows (over {max_steps} validation steps): "
            "its responseSchema asks for too much work, for example references that repeat each other, "
            "or the answer is very large. Send a smaller answer if it can be; otherwise the agent must "
            "simplify the schema, and the interrupt can only be cancelled meanwhile.",
            **_details(interrupt_id, max_steps=max_steps),
        ) from None
    except _UnsafePattern as exc:
        # Only reachable through a pattern the static scan cannot see, such as
        # one under an unknown keyword that a "$ref": "#/..." points at.
        raise ContractViolation(
            "UNSAFE_PATTERN",
            f"The responseSchema has a pattern Countersign cannot run safely ({exc}): patterns run with "
            f"RE2, which has no backreferences, lookahead or lookbehind. {_ONLY_CANCEL}",
            **_details(interrupt_id),
        ) from None
    except Exception as exc:  # noqa: BLE001 - untrusted schema: report, never crash
        # Covers referencing.exceptions.Unresolvable (a $ref to nowhere, or to
        # a remote document, which is never fetched) and RecursionError (a
        # $ref cycle such as {"$ref": "#"}), which pass the metaschema check.
        raise ContractViolation(
            "INVALID_SCHEMA",
            f"The responseSchema cannot be used to validate an answer ({_short(_described(exc), 200)}). "
            f"{_ONLY_CANCEL}",
            **_details(interrupt_id),
        ) from None
    return sorted(found, key=lambda e: (e["path"], e["message"]))


def _costly_errors(schema: Any, payload: Any, steps: int, interrupt_id: str | None) -> list[dict[str, str]]:
    """``_errors_within`` run in the worker process; its refusals raised here as they would be in-process."""
    pool = _costly_pool()
    try:
        future = pool.submit(_checked_in_worker, schema, payload, steps)
        outcome = future.result(timeout=COSTLY_WAIT_SECONDS)
    except (FutureTimeout, BrokenProcessPool) as problem:
        if isinstance(problem, BrokenProcessPool):
            _discard_pool(pool)  # the worker died (killed, out of memory): the next check starts a new one
        else:
            future.cancel()  # still queued behind other costly checks: drop it
        raise ContractViolation(
            "BUSY",
            "Countersign is busy checking other answers that need a lot of checking; "
            "send this one again in a few seconds.",
            **_details(interrupt_id, retry_after=int(COSTLY_WAIT_SECONDS)),
        ) from None
    kind, value = outcome
    if kind == "errors":
        return value
    if kind == "too_costly":
        raise _TooCostly
    if kind == "unsafe_pattern":
        raise _UnsafePattern(value)
    raise _WorkerFailure(value)


class _WorkerFailure(Exception):
    """Any other failure of a check in the worker (an unresolvable $ref, a cycle), as its text."""


def _described(problem: Exception) -> str:
    return str(problem) if isinstance(problem, _WorkerFailure) else f"{type(problem).__name__}: {problem}"


def _checked_in_worker(schema: Any, payload: Any, steps: int) -> tuple[str, Any]:
    """The worker's side of ``_costly_errors``: every outcome as plain, picklable data."""
    try:
        return "errors", _errors_within(schema, payload, steps)
    except _TooCostly:
        return "too_costly", None
    except _UnsafePattern as problem:
        return "unsafe_pattern", str(problem)
    except Exception as problem:  # noqa: BLE001 - reported to the caller as INVALID_SCHEMA
        return "failed", f"{type(problem).__name__}: {problem}"


def _errors_within(schema: Any, payload: Any, steps: int) -> list[dict[str, str]]:
    """Every error of *payload* against *schema*, or ``_TooCostly`` past *steps* steps."""
    token = _BUDGET.set(_Budget(steps))
    try:
        validator = _BoundedValidator(
            schema, format_checker=_FORMAT_CHECKER, registry=_NO_FETCH_REGISTRY
        )
        # Errors are produced lazily, so unresolvable $refs, the budget and
        # the like only surface while iterating: the whole iteration sits in
        # the caller's try.
        return [{"path": _pointer(err.absolute_path), "message": err.message} for err in validator.iter_errors(payload)]
    finally:
        _BUDGET.reset(token)


def _summary(errors: list[dict[str, str]]) -> str:
    """A sentence naming the first few payload errors and how many more there are."""
    parts = [f"at {e['path'] or 'the top level'}: {e['message']}" for e in errors[:_SUMMARY_ERRORS]]
    text = "; ".join(parts)
    rest = len(errors) - _SUMMARY_ERRORS
    if rest > 0:
        text += f" (and {rest} more problem{'s' if rest > 1 else ''})"
    return text


def validate_payload(schema: Any, payload: Any, interrupt_id: str | None = None) -> None:
    """Raise ``ContractViolation("INVALID_PAYLOAD", errors=[...])`` when *payload*
    does not match *schema* (rule 6), or ``INVALID_SCHEMA`` when the schema is broken.
    """
    errors = payload_errors(schema, payload, interrupt_id=interrupt_id)
    if errors:
        subject = f"The answer to interrupt {interrupt_id}" if interrupt_id else "The answer"
        raise ContractViolation(
            "INVALID_PAYLOAD",
            f"{subject} does not match its responseSchema: {_summary(errors)}. "
            "Correct the payload and submit it again.",
            **_details(interrupt_id, errors=errors),
        )


def supports_edits(schema: Any) -> bool:
    """Whether the interrupt offers approve-with-edits: ``editedArgs`` is declared
    under the schema's top-level ``properties`` (the spec's capability signal).

    ``"editedArgs": false`` forbids the key outright, so it does not count.
    """
    return edited_args_schema(schema) is not None


def edited_args_schema(schema: Any) -> dict[str, Any] | None:
    """The schema declared for ``editedArgs``, or ``None`` when edits are not offered.

    A ``true`` sub-schema (anything goes) is returned as the equivalent ``{}``
    so callers always get a dict to build an edit form from.
    """
    if not isinstance(schema, dict):
        return None
    properties = schema.get("properties")
    if not isinstance(properties, dict) or EDITED_ARGS not in properties:
        return None
    sub = properties[EDITED_ARGS]
    if sub is True:
        return {}
    if isinstance(sub, dict):
        return sub
    return None


def apply_edits(proposed_args: dict[str, Any], payload: Any, *, interrupt_id: str | None = None) -> dict[str, Any]:
    """The tool arguments to execute: a deep copy of ``payload["editedArgs"]`` when
    the answer carries edits, else a deep copy of *proposed_args*.

    ``editedArgs`` is a FULL REPLACEMENT, never merged with the proposal (spec,
    "Approve with edits"): a key the reviewer removed must not come back from the
    agent's proposal. Copies are returned so later changes to the result can
    never alter the recorded proposal or answer. Raises
    ``ContractViolation("INVALID_PAYLOAD")`` when ``editedArgs`` is present but
    is not an object (``null`` included).
    """
    if isinstance(payload, dict) and EDITED_ARGS in payload:
        edited = payload[EDITED_ARGS]
        if not isinstance(edited, dict):
            kind = "null" if edited is None else type(edited).__name__
            message = f"editedArgs must be an object holding the full tool arguments, not {kind}"
            subject = f"The answer to interrupt {interrupt_id}" if interrupt_id else "The answer"
            raise ContractViolation(
                "INVALID_PAYLOAD",
                f"{subject} is unusable: {message}. Send the complete arguments or leave editedArgs out.",
                **_details(interrupt_id, errors=[{"path": "/" + EDITED_ARGS, "message": message}]),
            )
        return copy.deepcopy(edited)
    return copy.deepcopy(proposed_args)


def approval_payload(schema: Any, approved: bool) -> Any:
    """The payload meaning "yes" (or "no") under ``schema``, or ``None`` when it has none.

    Denials go inside the payload (``{"approved": false}``), so a one-click
    approve or reject needs the schema's yes/no field: ``approved`` when the
    schema has it (the spec's tool-approval pattern), else its only required
    boolean property (``{"confirm": true}``), or a bare boolean for a boolean
    schema. No schema means the spec's default, ``{"approved": ...}``.
    """
    if schema is None:
        return {"approved": approved}
    if not isinstance(schema, dict):
        return None
    if schema.get("type") == "boolean":
        return approved
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return None

    def is_boolean(name: str) -> bool:
        return isinstance(properties.get(name), dict) and properties[name].get("type") == "boolean"

    if is_boolean("approved"):
        return {"approved": approved}
    required = [name for name in schema.get("required") or [] if isinstance(name, str)]
    if len(required) == 1 and is_boolean(required[0]):
        return {required[0]: approved}
    return None
