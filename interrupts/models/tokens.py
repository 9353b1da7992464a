"""API tokens, as knox's rows."""

from __future__ import annotations

from knox.models import AuthToken


class APIToken(AuthToken):
    """An API token as Countersign keeps it: knox's row, the token's SHA-512 digest and first characters.

    The token is stored nowhere: shown once (``hub.tokens.issue``), then named by ``token_key``.
    """

    class Meta:
        proxy = True
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.token_key}…"
