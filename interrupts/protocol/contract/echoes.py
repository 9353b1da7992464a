"""What a framework's own client puts back on a resume entry: taken when it is what Countersign writes.

Why it is shaped so: docs/internals/protocol.md (protocol/contract/echoes.py).
"""

from __future__ import annotations

import json
from typing import Any

from .. import dialects
from ..errors import ContractViolation

DIFFERS = "RESERVED_METADATA_DIFFERS"


def without_echoes(raw_interrupt: dict, status: str, payload: Any, metadata: Any) -> Any:
    """``metadata`` without the framework keys that equal what Countersign builds; refused if one differs.

    Anything that is not an object, or holds no such key, is returned as it
    is (the contract's checks say what is wrong with it).
    """
    if not isinstance(metadata, dict) or not (claimed := dialects.RESERVED_METADATA_KEYS & metadata.keys()):
        return metadata
    built = dialects.entry_metadata(raw_interrupt, status, payload)
    interrupt_id = raw_interrupt.get("id") if isinstance(raw_interrupt, dict) else None
    for key in sorted(claimed):
        if key not in built:
            raise ContractViolation(
                DIFFERS, f"The answer to interrupt {interrupt_id} carries metadata key {key!r}, but the interrupt "
                         "the agent raised gives Countersign nothing to write there (its framework's binding is "
                         "missing or one the framework would not read); leave the key out.",
                interrupt_id=interrupt_id, key=key)
        if (where := _first_difference(metadata[key], built[key])) is not None:
            raise ContractViolation(
                DIFFERS, f"The answer to interrupt {interrupt_id} carries metadata key {key!r} that differs from the "
                         f"one Countersign builds from the interrupt the agent raised ({where}); leave the key out, "
                         "or send it as the framework's client built it from that interrupt.",
                interrupt_id=interrupt_id, key=key)
    return {k: v for k, v in metadata.items() if k not in claimed}


def _first_difference(sent: Any, built: Any, path: str = "") -> str | None:
    """Where ``sent`` first differs from ``built`` as JSON, in words; None when they are the same."""
    if isinstance(built, dict) and isinstance(sent, dict):
        for name in sorted(built.keys() | sent.keys()):
            if name not in sent:
                return f"{_field(path, name)} is missing"
            if name not in built:
                return f"{_field(path, name)} is not one Countersign writes"
            if (where := _first_difference(sent[name], built[name], f"{path}.{name}" if path else name)) is not None:
                return where
        return None
    if _canonical(sent) == _canonical(built):
        return None
    # The field, not the values: a refusal is no way to read what the interrupt holds.
    return f"{path or 'its value'} is different"


def _field(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _canonical(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return repr(value)
