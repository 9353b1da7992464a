"""API tokens, with guessing them made slow: failed token attempts are counted per address.

DRF's authenticator raises AuthenticationFailed before any throttle runs, so
the request throttles (REST_FRAMEWORK's DEFAULT_THROTTLE_CLASSES) never see
a caller who only sends wrong tokens. This one counts those failures itself
and, past ``failed_token`` in DEFAULT_THROTTLE_RATES, answers 429 THROTTLED
with Retry-After without looking the token up at all.
"""

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
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


class ThrottledTokenAuthentication(TokenAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if header.split(" ", 1)[0].lower() != self.keyword.lower():
            return None  # no token offered: session auth, or 401 NOT_AUTHENTICATED later
        throttle = FailedTokenThrottle()
        wait = throttle.wait_before_next(request)
        if wait is not None:
            raise exceptions.Throttled(
                wait, detail=f"Too many failed token attempts from this address; try again in {wait:.0f} s, "
                             "with a valid token (manage.py drf_create_token <user> prints one).")
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            throttle.record_failure()
            raise
