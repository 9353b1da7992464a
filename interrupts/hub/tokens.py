"""API tokens: issued, checked and revoked here, and kept at rest only as digests.

Storage is django-rest-knox's: a row holds the SHA-512 digest of its token
and the token's first characters (``token_key``, indexed, to find the row),
never the token, which is shown once when issued. A database reader can
match no row to a token; checking one costs one indexed lookup and one hash.
Tokens last until revoked unless COUNTERSIGN_TOKEN_DAYS (or ``tokens create
--days``) gives them an expiry; an expired token is refused, and deleted.

The REST API and the AG-UI gateway both take ``Authorization: Token <key>``,
and both count a wrong token here, so a token cannot be guessed faster
through one door than the other. Past ``failed_token`` in REST_FRAMEWORK's
DEFAULT_THROTTLE_RATES an address is answered 429 THROTTLED with
Retry-After, without its token being looked up at all.
"""

from datetime import timedelta

from django.utils import timezone
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.crypto import hash_token
from knox.settings import CONSTANTS
from rest_framework import exceptions
from rest_framework.throttling import SimpleRateThrottle

from .. import conf
from ..models import APIToken

#: How many of a token's first characters are kept in the clear, to find its row (and to name it).
KEY_CHARS = CONSTANTS.TOKEN_KEY_LENGTH


class TokenAuthentication(KnoxTokenAuthentication):
    """knox's check of ``Authorization: Token <key>``, at one query per request."""

    def authenticate_credentials(self, token: bytes):
        try:
            token.decode("utf-8")
        except UnicodeDecodeError:
            # knox would let this escape as a 500; it is just a wrong token.
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        return super().authenticate_credentials(token)

    def _cleanup_token(self, auth_token) -> bool:
        # knox also sweeps the user's other expired tokens here, a second query on
        # every request; only the token presented is looked at: refused, and deleted, once expired.
        if auth_token.expiry is not None and auth_token.expiry < timezone.now():
            auth_token.delete()
            return True
        return False


def user_for(key: str):
    """The active user whose token ``key`` is, or None (unknown, revoked, expired, or the user is inactive)."""
    try:
        user, _ = TokenAuthentication().authenticate_credentials(key.encode())
    except exceptions.AuthenticationFailed:
        return None
    return user


def issue(user, *, days: float | None = None) -> tuple[APIToken, str]:
    """A new token for ``user``: its row, and the token itself, which exists nowhere once shown.

    ``days``: how long it lasts (0: until revoked); None takes COUNTERSIGN_TOKEN_DAYS.
    """
    days = conf.settings.COUNTERSIGN_TOKEN_DAYS if days is None else days
    if days < 0:
        raise ValueError("A token cannot last a negative number of days.")
    return APIToken.objects.create(user=user, expiry=timedelta(days=days) if days else None)


def revoke(key: str) -> int:
    """Revoke the token ``key`` names: the whole token, or the first KEY_CHARS characters that list it.

    Returns how many tokens went (0 or 1, barring two tokens sharing those characters).
    """
    if len(key) < KEY_CHARS:
        raise ValueError(f"Name a token by at least its first {KEY_CHARS} characters.")
    rows = APIToken.objects.filter(token_key=key[:KEY_CHARS])
    if len(key) > KEY_CHARS:
        rows = rows.filter(digest=hash_token(key))
    deleted, _ = rows.delete()
    return deleted


def revoke_all(user) -> int:
    """Revoke every token of ``user``; how many went."""
    deleted, _ = APIToken.objects.filter(user=user).delete()
    return deleted


class FailedTokenThrottle(SimpleRateThrottle):
    """Failed token attempts per client address (REMOTE_ADDR: see NUM_PROXIES in settings)."""

    scope = "failed_token"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def wait_before_next(self, request) -> float | None:
        """Seconds this address must wait before its next token is looked at, or None if it may go on."""
        self.key = self.get_cache_key(request, None)
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()
        if len(self.history) < self.num_requests:
            return None
        return max(self.history[-1] + self.duration - self.now, 1)

    def record_failure(self) -> None:
        """Count a failure (after ``wait_before_next``, which read this address's history)."""
        self.history.insert(0, self.now)
        self.cache.set(self.key, self.history, self.duration)


def too_many_failures(wait: float) -> str:
    """What a throttled address is told, on every door."""
    return (f"Too many failed token attempts from this address; try again in {wait:.0f} s, "
            "with a valid token (manage.py tokens create <user> prints one).")
