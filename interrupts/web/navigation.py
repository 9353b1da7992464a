"""Where a page sends people next: back to where they came from, never off the site.

Actions answer htmx requests with the fragment to swap in; without JavaScript
the same forms post normally and come back here with a message.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme


def without(params, *names: str) -> str:
    """*params* as a query string, *names* left out."""
    params = params.copy()
    for name in names:
        params.pop(name, None)
    return params.urlencode()


def without_page(params) -> str:
    return without(params, "page", "format")


def safe_next(request, target: str | None, fallback: str) -> str:
    """``target`` if it points back into this site, else ``fallback``: never an open redirect."""
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                  require_https=request.is_secure()):
        return target
    return fallback


def back_to(request, fallback: str) -> str:
    """The form's ``next`` when it is safe, else *fallback*."""
    return safe_next(request, request.POST.get("next"), fallback)


def htmx_or_redirect(request, partial: Callable[[], HttpResponse], back: str,
                     *notes: tuple[Callable, str]) -> HttpResponse:
    """The fragment ``partial()`` for htmx; without JavaScript each ``(messages.level, text)`` note, then *back*."""
    if request.htmx:
        return partial()
    for level, text in notes:
        level(request, text)
    return redirect(back)
