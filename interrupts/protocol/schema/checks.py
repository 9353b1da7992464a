"""Is a schema usable at all: the static scan first, then the draft 2020-12 metaschema."""

from __future__ import annotations

import functools
import json
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from ..errors import ContractViolation
from .problems import ONLY_CANCEL, Problem, json_pointer, with_id
from .scan import canonical_json, schema_problems
from .validator import FORMAT_CHECKER


@functools.lru_cache(maxsize=1024)
def _check_against_metaschema(schema_json: str) -> None:
    # ~3 ms a check, and the same few schemas come back with every decision:
    # the ones that passed are remembered (a SchemaError is not cached). The
    # "regex" format it applies to patterns is RE2's (FORMAT_CHECKER).
    Draft202012Validator.check_schema(json.loads(schema_json), format_checker=FORMAT_CHECKER)


def check_schema(schema: Any, *, interrupt_id: str | None = None) -> None:
    """Raise ``INVALID_SCHEMA`` unless *schema* is a JSON Schema draft 2020-12 object,
    or ``SCHEMA_TOO_LARGE`` (checked first, so an oversized schema is read no further).

    Boolean schemas are refused: AG-UI's ``Interrupt`` declares ``responseSchema``
    an object. References and patterns are ``schema_problems``' concern.
    """
    if not isinstance(schema, dict):
        raise ContractViolation(
            "INVALID_SCHEMA",
            f"The responseSchema must be a JSON object, not {type(schema).__name__}; "
            "the agent must send a JSON Schema (draft 2020-12) object.",
            **with_id(interrupt_id),
        )
    try:
        _check_against_metaschema(canonical_json(schema))
    except Problem as problem:
        raise problem.as_violation(interrupt_id) from None
    except SchemaError as exc:
        where = json_pointer(exc.absolute_path) or "the top level"
        raise ContractViolation(
            "INVALID_SCHEMA",
            f"The responseSchema is not a valid JSON Schema (draft 2020-12) at {where}: "
            f"{exc.message}. {ONLY_CANCEL}",
            **with_id(interrupt_id, errors=[{"path": json_pointer(exc.absolute_path), "message": exc.message}]),
        ) from None
    except Exception as exc:  # noqa: BLE001 - untrusted input: report, never crash
        raise ContractViolation(
            "INVALID_SCHEMA",
            f"The responseSchema could not be checked ({type(exc).__name__}: {exc}).",
            **with_id(interrupt_id),
        ) from None


def check_usable_schema(schema: Any, *, interrupt_id: str | None = None) -> None:
    """Raise the first reason answers under *schema* must be refused; return quietly when validating is safe.

    The scan comes first: a pattern RE2 refuses also fails the metaschema's
    ``regex`` format, and UNSAFE_PATTERN says why. Both are cached on the
    schema's canonical JSON.
    """
    for problem in schema_problems(schema, interrupt_id=interrupt_id):
        raise problem
    check_schema(schema, interrupt_id=interrupt_id)
