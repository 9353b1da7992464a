"""Field types of Countersign's own."""

from __future__ import annotations

from django.db import models


class ExactJSONField(models.JSONField):
    """JSON kept as the text that was written: PostgreSQL's ``json``, not ``jsonb``.

    ``jsonb`` re-spells what it stores (keys sorted, spacing and number
    spellings normalised), so the log could not show an agent's exact bytes.
    ``json`` keeps the text and still answers ``->`` and ``->>``; it has no
    ``=`` or ``@>``, so lookups that compare a key's value need a cast to
    ``jsonb``. SQLite keeps JSON as text already.
    """

    def db_type(self, connection):
        return "json" if connection.vendor == "postgresql" else super().db_type(connection)

    def from_db_value(self, value, expression, connection):
        # psycopg decodes json itself (Django sets a text loader for jsonb only).
        if value is None or not isinstance(value, (str, bytes, bytearray)):
            return value
        return super().from_db_value(value, expression, connection)
