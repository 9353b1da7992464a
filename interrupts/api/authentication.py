"""API tokens (knox's digests, see interrupts.hub.tokens), with guessing them made slow.

DRF's authenticators raise AuthenticationFailed before any throttle runs, so
the request throttles (REST_FRAMEWORK's DEFAULT_THROTTLE_CLASSES) never see
a caller who only sends wrong tokens. This one counts those failures itself
and, past ``failed_token`` in DEFAULT_THROTTLE_RATES, answers 429 THROTTLED
with Retry-After without looking the token up at all.
"""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
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


class ThrottledTokenScheme(OpenApiAuthenticationExtension):
    """How the API schema describes these tokens (as DRF's own scheme did: ``Token <key>``)."""

    target_class = ThrottledTokenAuthentication
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Token")
