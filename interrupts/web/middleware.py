"""Requests no view can serve safely are refused before any view runs."""

from django.http import HttpResponse, HttpResponseBadRequest

from ..hub import refusals

# The doors machines use answer JSON; pages answer text.
MACHINE_PREFIXES = ("/api/", "/agui/")


class RefuseNulCharacters:
    """A NUL character in the path or query string gets 400.

    PostgreSQL cannot hold NUL in text, so a lookup with one raises a
    database error (a 500) deep inside a page; SQLite would silently find
    nothing. Either way the request is malformed, and says so here the same
    on every database.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path or "%00" in request.META.get("QUERY_STRING", "") or any(
            "\x00" in value for values in request.GET.lists() for value in values[1]
        ):
            message = "The address holds a NUL character (%00), which no name or filter can contain."
            if request.path.startswith(MACHINE_PREFIXES):
                return refusals.json_response(refusals.refused(400, "NUL_CHARACTER", message))
            return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


def login_lockout(request, response, credentials):
    """The page for a username and address past AXES_FAILURE_LIMIT failed logins (axes' AXES_LOCKOUT_CALLABLE).

    429 with Retry-After, and the time to try again: each attempt during the
    lockout starts the cool-off anew, so it is counted from now.
    """
    from django.conf import settings
    from django.shortcuts import render
    from django.utils import timezone

    cool_off = settings.AXES_COOLOFF_TIME
    response = render(request, "registration/lockout.html", {
        "retry_at": timezone.now() + cool_off,
        "minutes": max(round(cool_off.total_seconds() / 60), 1),
        "failure_limit": settings.AXES_FAILURE_LIMIT,
    }, status=429)
    response["Retry-After"] = str(int(cool_off.total_seconds()))
    return response


class BusyDatabase:
    """A view that failed on a busy database answers 503 with Retry-After: try again, nothing was changed.

    The API answers its own (interrupts.api.errors); this covers the pages and
    the gateway, which would otherwise show a 500 "server error".
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not refusals.database_busy(exception):
            return None
        rendered = refusals.render(refusals.busy())
        if request.path.startswith(MACHINE_PREFIXES):
            return refusals.json_response(rendered)
        response = HttpResponse(rendered.body["detail"], status=rendered.status, content_type="text/plain; charset=utf-8")
        for name, value in rendered.headers.items():
            response[name] = value
        return response
