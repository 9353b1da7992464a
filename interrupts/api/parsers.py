"""How the REST API reads a request body: JSON, and only JSON Countersign can keep and send on.

DRF's JSON parser takes what would fail later, as a 500 or in the background:
a NUL character (PostgreSQL refuses it), nesting deeper than the AG-UI models
serialise (a decision's payload is sent back inside the resume: it used to be
accepted, then fail), and nesting so deep that ``json.loads`` itself overflows
the stack.
"""

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from ..protocol import storable


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser (size limit and strict constants included), refusing what cannot be stored."""

    def parse(self, stream, media_type=None, parser_context=None):
        subject = "The request body"
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            refused = storable.too_deep(subject)
        else:
            refused = storable.problem(data, subject)
        if refused is not None:
            raise ParseError(refused.message, code=refused.code.lower())
        return data
