"""Whether a call's args fall within a standing grant's scope: the hub's grants and the reads' simulation ask."""

from __future__ import annotations

from ..protocol.errors import ProtocolError
from ..protocol.schema.limits import FAST_VALIDATION_STEPS
from ..protocol.schema.payloads import payload_errors


def covers(args_schema: dict, args) -> bool:
    """Whether ``args`` fit a grant's ``args_schema``; a schema that became unusable covers nothing.

    Args that are not an object fit only a schema that holds them whole (``const``): JSON Schema's
    ``properties`` and ``required`` say nothing of a string or a list, so they would let anything through.
    """
    whole = isinstance(args_schema, dict) and "const" in args_schema
    if args is not None and not isinstance(args, dict) and not whole:
        return False
    try:
        # The fast budget only: a call is checked against up to every grant of its tool as its run ends,
        # and a scope that needs the costly worker covers nothing rather than queue the reviewers' answers.
        return not payload_errors(args_schema, args if args is not None else {}, max_steps=FAST_VALIDATION_STEPS)
    except ProtocolError:
        return False
