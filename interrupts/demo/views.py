"""Serve an SDK ``Agent`` from Django: the app's side of the SDK, which itself never imports Django.

Agent endpoints are called by machines (the hub, curl, any AG-UI client), so
they take no session and no CSRF token; a credential is ``auth``'s to check.
What a request gets is ``driver.respond``'s, shared with ``asgi.agent_app``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from ..protocol import signing
from ..sdk.agent import Agent
from ..sdk.driver import STREAM_HEADERS, BodyTooLarge, Refusal, respond


def agent_view(agent: Agent, auth: Callable[[HttpRequest], bool] | None = None, *,
               signing_secret: Callable[[], str | None | Awaitable[str | None]] | None = None,
               require_signature: Callable[[], bool] | None = None):
    """An async Django view that runs ``agent`` once per POSTed RunAgentInput.

    Answers as ``driver.respond`` says (refusals, signatures, fingerprints);
    the body's bound is Django's DATA_UPLOAD_MAX_MEMORY_SIZE.
    """

    @csrf_exempt
    @login_not_required
    async def view(request: HttpRequest):
        async def read_body() -> bytes:
            try:
                return request.body
            except RequestDataTooBig:
                raise BodyTooLarge from None

        answer = await respond(
            agent,
            method=request.method,
            content_type=request.META.get("CONTENT_TYPE"),
            signature=request.headers.get(signing.SIGNATURE_HEADER),
            read_body=read_body,
            authorized=None if auth is None else (lambda: auth(request)),
            signing_secret=signing_secret,
            require_signature=require_signature,
        )
        if isinstance(answer, Refusal):
            response, headers = JsonResponse(answer.body, status=answer.status), answer.headers
        else:
            response, headers = StreamingHttpResponse(answer), STREAM_HEADERS
        for name, value in headers.items():
            response[name] = value
        return response

    view.agent = agent
    return view
