"""Requests no view can serve safely are refused before any view runs."""

import sys

from django.conf import settings
from django.core.signals import got_request_exception
from django.db import DatabaseError, connections
from django.dispatch import receiver
from django.http import HttpResponse, HttpResponseBadRequest
from django.template.loader import render_to_string

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
    minutes = max(round(cool_off.total_seconds() / 60), 1)
    retry_after = int(cool_off.total_seconds())
    if "application/json" in request.headers.get("Accept", ""):  # a page's script (adding a passkey) says it
        return refusals.json_response(refusals.refused(
            429, "LOCKED_OUT", f"Too many wrong passwords: try again in {minutes} minute{'s' if minutes != 1 else ''}.",
            retry_after=retry_after))
    response = render(request, "registration/lockout.html", {
        "retry_at": timezone.now() + cool_off, "minutes": minutes, "failure_limit": settings.AXES_FAILURE_LIMIT,
    }, status=429)
    response["Retry-After"] = str(retry_after)
    return response


class DatabaseFaults:
    """A request that met a database which cannot serve now is answered 503 with Retry-After, never a 500.

    The fault may come from a view (``process_exception``), from the API's own
    handler (interrupts.api.errors notes it on the request), or from another
    middleware around the view, such as the session's read or save, which only
    Django's ``got_request_exception`` sees (:func:`note_fault`). A GET or HEAD
    that lost its connection is served once more on a fresh one: a restart's
    dead connections are thrown away, and a read changes nothing when repeated.
    Machines (/api/, /agui/) get the refusal as JSON; browsers a page.
    """

    SAFE_METHODS = ("GET", "HEAD")

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self._answer(request)
        if request.method in self.SAFE_METHODS and refusals.retry_on_fresh_connection(fault_of(request)):
            # Every connection this thread holds may be one the restart killed.
            connections.close_all()
            response = self._answer(request)
        return response

    def _answer(self, request):
        request.database_fault = None
        response = self.get_response(request)
        fault = fault_of(request)
        if fault is not None and response.status_code == 500:
            # Raised around the view (a session read or save): Django answered 500.
            return fault_response(request, fault)
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        # A browser's session and user are read before the view (LoginRequiredMiddleware),
        # where a fault reaches Django's 500 handling, and its debug page reads them again,
        # a pool timeout each: read them here first, and answer a fault at once.
        if settings.SESSION_COOKIE_NAME not in request.COOKIES or not hasattr(request, "user"):
            return None
        try:
            request.user.is_authenticated  # noqa: B018 (loads the session and the user)
        except DatabaseError as problem:
            if (answer := self.process_exception(request, problem)) is None:
                raise
            return answer
        return None

    def process_exception(self, request, exception):
        fault = refusals.database_fault(exception)
        if fault is None:
            return None
        request.database_fault = fault
        return fault_response(request, fault)


def fault_of(request):
    """The database fault this request met, if any (see :class:`DatabaseFaults`)."""
    return getattr(request, "database_fault", None)


@receiver(got_request_exception)
def note_fault(sender, request=None, **kwargs):
    """Note on the request a database fault Django is about to answer with a 500: DatabaseFaults answers it."""
    problem = sys.exc_info()[1]
    if request is not None and problem is not None and (fault := refusals.database_fault(problem)) is not None:
        request.database_fault = fault


def fault_response(request, fault) -> HttpResponse:
    """``fault`` as JSON for machines, or as a page a person can read (which needs no database)."""
    rendered = refusals.render(fault)
    if request.path.startswith(MACHINE_PREFIXES):
        return refusals.json_response(rendered)
    # Rendered without the request: the site's context processors read the database.
    page = render_to_string("503.html", {"fault": fault, "retry_after": rendered.headers["Retry-After"]})
    response = HttpResponse(page, status=rendered.status)
    for name, value in rendered.headers.items():
        response[name] = value
    return response
