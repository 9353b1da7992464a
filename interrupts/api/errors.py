"""Every API refusal is JSON ``{code, detail}`` with a status that says whose move it is."""

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.response import Response

from ..protocol.errors import ProtocolError
from ..refusals import http_status


def exception_handler(exc, context):
    if isinstance(exc, ProtocolError):
        return Response({"code": exc.code, "detail": exc.message, **exc.details}, status=http_status(exc))
    # Django's own exceptions, as DRF's handler would translate them.
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = {"code": "INVALID_REQUEST", "detail": "The request has invalid fields.", "fields": exc.detail}
    else:
        code = exc.get_codes()
        response.data = {"code": (code if isinstance(code, str) else "error").upper(), "detail": str(exc.detail)}
    if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        # Session auth alone would answer 403; say "log in" properly, with how.
        response.status_code = status.HTTP_401_UNAUTHORIZED
        response["WWW-Authenticate"] = "Token"
    return response
