"""Serve an ``Agent`` from Django: POST RunAgentInput, answer text/event-stream.

The only module of the SDK that knows Django. Agent endpoints are called by
machines (Countersign's hub, curl, any AG-UI client), so they take no session
and no CSRF token; an endpoint that needs a credential checks it in ``auth``.
What the endpoint does with a request is ``driver.respond``'s, shared with
``asgi.agent_app``; this view only translates Django's request and response.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from ..protocol import signing
from .agent import Agent
from .driver import STREAM_HEADERS, BodyTooLarge, Refusal, respond


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
