"""The Content-Security-Policy on every HTTP response, error and debug pages included.

Django's middleware sets ``SECURE_CSP`` on what passes through it, but its
debug pages (the technical 404 and 500, DEBUG's default) opt out of any
policy, and a request Django refuses before its middleware runs (a body past
DATA_UPLOAD_MAX_MEMORY_SIZE, a malformed query string) gets no header at all.
Here the debug pages get the site's policy plus the hashes of Django's own
``<style>`` blocks (styled, still no script), and ``everywhere`` gives any
response still without a policy the site's.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re

from django.conf import settings
from django.middleware.csp import ContentSecurityPolicyMiddleware
from django.utils.csp import CSP, build_policy
from django.views.debug import builtin_template_path

HEADER = str(CSP.HEADER_ENFORCE)
# Django's pages that opt out of the policy (``csp_override({})``) and the inline styles they carry.
DEBUG_TEMPLATES = ("technical_404.html", "technical_500.html", "default_urlconf.html")
_STYLE = re.compile(r"<style>(.*?)</style>", re.DOTALL)


@functools.cache
def _debug_style_hashes() -> tuple[str, ...]:
    # Read from Django's template files, never from a response: a hash of what a page
    # holds would allow whatever an error message slipped into it.
    hashes = set()
    for name in DEBUG_TEMPLATES:
        for body in _STYLE.findall(builtin_template_path(name).read_text(encoding="utf-8")):
            if "{%" in body or "{{" in body:  # rendered differently each time: no fixed hash
                continue
            digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
            hashes.add(f"'sha256-{digest}'")
    return tuple(sorted(hashes))


def debug_page_policy() -> dict:
    """The site's policy with Django's debug-page stylesheets allowed by hash; their scripts stay blocked.

    Without their script the debug 500 page shows every frame's context lines
    at once rather than folded, which loses nothing a developer needs.
    """
    policy = dict(settings.SECURE_CSP)
    policy["style-src"] = [*policy.get("style-src", [CSP.SELF]), *_debug_style_hashes()]
    return policy


class ContentSecurityPolicy(ContentSecurityPolicyMiddleware):
    """Django's middleware, except that a page opting out of every policy gets the debug pages' one."""

    def process_response(self, request, response):
        if getattr(response, "_csp_config", None) == {}:
            response._csp_config = debug_page_policy()
        return super().process_response(request, response)


def everywhere(app):
    """Wrap an ASGI HTTP app so that no response leaves without a Content-Security-Policy."""
    name = HEADER.lower().encode("latin-1")

    async def with_policy(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)

        async def sending(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if not any(key.lower() == name for key, _ in headers):
                    headers.append((name, build_policy(settings.SECURE_CSP).encode("latin-1")))
                    message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, sending)

    return with_policy
