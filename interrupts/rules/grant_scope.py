"""Whether a call's args fall within a standing grant's scope: the hub's grants and the reads' simulation ask."""

from __future__ import annotations

from ..protocol.errors import ProtocolError
from ..protocol.schema.payloads import payload_errors


def covers(args_schema: dict, args) -> bool:
    """Whether ``args`` fit a grant's ``args_schema``; a schema that became unusable covers nothing."""
    try:
        return not payload_errors(args_schema, args if args is not None else {})
    except ProtocolError:
        return False
