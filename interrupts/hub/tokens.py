"""Guessing API tokens made slow: failed token attempts are counted per address, for every door.

The REST API and the AG-UI gateway both take ``Authorization: Token <key>``;
both count a wrong token here, so a token cannot be guessed faster through
one door than the other. Past ``failed_token`` in REST_FRAMEWORK's
DEFAULT_THROTTLE_RATES an address is answered 429 THROTTLED with Retry-After,
without its token being looked up at all.
"""

from rest_framework.throttling import SimpleRateThrottle


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
            "with a valid token (manage.py drf_create_token <user> prints one).")
