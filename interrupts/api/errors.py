"""Every API refusal is the one refusal body (interrupts.hub.refusals) with a status that says whose move it is."""

from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.db import DataError
from django.http import Http404
from django.urls import Resolver404, resolve
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from ..hub import refusals
from ..protocol.errors import ProtocolError, refusal_body


def exception_handler(exc, context):
    response = _refusal(exc, context)
    if response is not None and (request := context.get("request")) is not None:
        # JSON whatever the view renders otherwise: the schema view's renderer
        # answered an anonymous caller's 401 as "application/vnd.oai.openapi".
        request.accepted_renderer, request.accepted_media_type = JSONRenderer(), "application/json"
    return response


def _refusal(exc, context):
    if (fault := refusals.database_fault(exc)) is not None:
        # Noted on the request: the middleware serves a GET that lost its connection once more.
        if (request := context.get("request")) is not None:
            getattr(request, "_request", request).database_fault = fault
        exc = fault
    if isinstance(exc, ProtocolError):
        # BUSY (e.g. costly schema checks queued) and the database's faults carry Retry-After:
        # the same request will do, later.
        rendered = refusals.render(exc)
        return Response(rendered.body, status=rendered.status, headers=rendered.headers)
    exc = _as_api_exception(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = refusal_body("INVALID_REQUEST", "The request has invalid fields.", fields=exc.detail)
    else:
        code = exc.get_codes()
        response.data = refusal_body((code if isinstance(code, str) else "error").upper(), str(exc.detail))
    if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        # Session auth alone would answer 403; say "log in" properly, with how.
        response.status_code = status.HTTP_401_UNAUTHORIZED
        response["WWW-Authenticate"] = "Token"
    return response


class TooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"


def _as_api_exception(exc):
    """Django's own refusals, and the database's refusal of the client's text, as DRF exceptions."""
    if isinstance(exc, Http404):
        return exceptions.NotFound()
    if isinstance(exc, PermissionDenied):
        return exceptions.PermissionDenied()
    # Raised while reading the body: Django would answer them with an HTML page.
    if isinstance(exc, RequestDataTooBig):
        return TooLarge("The request body is larger than this server accepts (COUNTERSIGN_MAX_REQUEST_BYTES).")
    if isinstance(exc, SuspiciousOperation):
        return exceptions.ParseError(f"The request was refused: {exc}", code="bad_request")
    if isinstance(exc, DataError) and _is_nul_refusal(exc):
        # PostgreSQL cannot hold NUL in text or jsonb; the JSON parser refuses it
        # in bodies, and this covers the path and the query string.
        return exceptions.ParseError(
            "The request contains a NUL character (\\u0000), which cannot be stored; remove it.", code="nul_character"
        )
    return exc


def _is_nul_refusal(exc: DataError) -> bool:
    cause = exc.__cause__
    # psycopg refuses a NUL in a text parameter before sending it (no SQLSTATE);
    # PostgreSQL refuses \u0000 in jsonb with 22P05 (untranslatable character).
    return "NUL (0x00)" in str(exc) or getattr(cause, "sqlstate", None) == "22P05"


@extend_schema(exclude=True)
class NoSuchEndpoint(APIView):
    """Every path under /api/ that no endpoint serves: 404 JSON, where Django would answer an HTML page."""

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authenticated first: anonymous callers get 401, as everywhere
        path = request.path
        hint = ""
        if not path.endswith("/") and _served(path + "/"):
            hint = f"; API paths end in a slash: {path}/"
        raise exceptions.NotFound(f"No API endpoint at {path}{hint}.")


def _served(path: str) -> bool:
    try:
        match = resolve(path)
    except Resolver404:
        return False
    return getattr(match.func, "view_class", None) is not NoSuchEndpoint
