"""API tokens (knox's digests, see interrupts.hub.tokens), with guessing them made slow.

DRF's authenticators raise AuthenticationFailed before any throttle runs, so
the request throttles (REST_FRAMEWORK's DEFAULT_THROTTLE_CLASSES) never see
a caller who only sends wrong tokens. This one counts those failures itself
and, past ``failed_token`` in DEFAULT_THROTTLE_RATES, answers 429 THROTTLED
with Retry-After without looking the token up at all.
"""

from rest_framework import exceptions

from ..hub.tokens import FailedTokenThrottle, TokenAuthentication, too_many_failures


class ThrottledTokenAuthentication(TokenAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if header.split(" ", 1)[0].lower() != self.authenticate_header(request).lower():
            return None  # no token offered: session auth, or 401 NOT_AUTHENTICATED later
        throttle = FailedTokenThrottle()
        wait = throttle.wait_before_next(request)
        if wait is not None:
            raise exceptions.Throttled(wait, detail=too_many_failures(wait))
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            throttle.record_failure()
            raise
