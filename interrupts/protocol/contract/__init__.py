"""The eight rules of the AG-UI interrupt contract, as pure checks.

Why it is shaped so: docs/internals/protocol.md (protocol/contract/__init__.py).
"""

from .answers import (
    RESERVED_METADATA_KEY,
    RESERVED_REASON_PREFIX,
    check_entry,
    duplicate_ids,
    interrupt_problems,
    outcome_problems,
    parse_expiry,
)
from .gate import ThreadGate, Verdict, check_coverage, check_input, check_tool_answers, idempotency_key

__all__ = [
    "RESERVED_METADATA_KEY",
    "RESERVED_REASON_PREFIX",
    "ThreadGate",
    "Verdict",
    "check_coverage",
    "check_entry",
    "check_input",
    "check_tool_answers",
    "duplicate_ids",
    "idempotency_key",
    "interrupt_problems",
    "outcome_problems",
    "parse_expiry",
]
