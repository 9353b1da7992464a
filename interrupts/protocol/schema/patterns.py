"""An agent's patterns on RE2: linear time, bounded memory, compiled once."""

from __future__ import annotations

import functools
from typing import Any

import re2

from .limits import MAX_PATTERN_CHARS, MAX_PATTERN_MEMORY
from .problems import ONLY_CANCEL, Problem, place, shortened


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.max_mem = MAX_PATTERN_MEMORY
    # RE2 logs every refused pattern to stderr by default: an agent could fill the logs.
    options.log_errors = False
    # Only "does it match" is asked, never groups: RE2 stays on its DFA path.
    options.never_capture = True
    return options


_RE2_OPTIONS = _re2_options()
_HEX = frozenset("0123456789abcdefABCDEF")


def to_re2_syntax(pattern: str) -> str:
    r"""*pattern* with ECMA-262's ``\uXXXX`` escapes spelled as RE2's ``\x{XXXX}``.

    The only gap between the two dialects that matters in practice. One linear
    pass; every other escape is copied, so ``\\u0041`` stays a literal.
    """
    if "\\u" not in pattern:
        return pattern
    out, i, n = [], 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\" and i + 1 < n:
            hex_digits = pattern[i + 2 : i + 6]
            if pattern[i + 1] == "u" and len(hex_digits) == 4 and all(c in _HEX for c in hex_digits):
                out.append("\\x{" + hex_digits + "}")
                i += 6
            else:
                out.append(pattern[i : i + 2])
                i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


class UnsafePattern(Exception):
    """RE2 refuses a pattern; the argument is RE2's reason."""


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
    """*pattern* compiled by RE2 (cached), or ``UnsafePattern`` raised."""
    # jsonschema applies a pattern once per value, and additionalProperties
    # re-reads every patternProperties key per property. Refusals are not cached.
    return compile_pattern(pattern)


def compile_pattern(pattern: str) -> Any:
    """*pattern* compiled by RE2, uncached, or ``UnsafePattern`` raised."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise UnsafePattern(f"it is {len(pattern)} characters long; Countersign compiles patterns of at most "
                            f"{MAX_PATTERN_CHARS}")
    try:
        return re2.compile(to_re2_syntax(pattern), _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "refused"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise UnsafePattern(str(reason)) from None
    except (TypeError, ValueError) as exc:  # e.g. a lone surrogate, not encodable as UTF-8
        raise UnsafePattern(str(exc)) from None


def unsafe_pattern(pattern: str, pointer: str, reason: str) -> Problem:
    """UNSAFE_PATTERN for *pattern* at *pointer* in the schema."""
    return Problem(
        "UNSAFE_PATTERN",
        f"The responseSchema's pattern {shortened(pattern)!r} at {place(pointer)} cannot be run safely "
        f"({reason}): Countersign runs patterns with RE2, in linear time, which has no backreferences, "
        f"lookahead or lookbehind and refuses very large patterns. {ONLY_CANCEL}",
        pointer=pointer,
        pattern=pattern,
    )
