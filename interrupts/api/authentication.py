"""API tokens, with guessing them made slow (interrupts.hub.tokens counts the failures).

DRF's authenticator raises AuthenticationFailed before any throttle runs, so
the request throttles (REST_FRAMEWORK's DEFAULT_THROTTLE_CLASSES) never see
a caller who only sends wrong tokens. This one counts those failures itself
and, past ``failed_token`` in DEFAULT_THROTTLE_RATES, answers 429 THROTTLED
with Retry-After without looking the token up at all.
"""

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from ..hub.tokens import FailedTokenThrottle, too_many_failures


class ThrottledTokenAuthentication(TokenAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if header.split(" ", 1)[0].lower() != self.keyword.lower():
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
