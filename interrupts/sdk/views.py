"""Serve an ``Agent`` as an AG-UI endpoint: POST RunAgentInput, answer text/event-stream.

The only module of the SDK that knows Django. Agent endpoints are called by
machines (Countersign's hub, curl, any AG-UI client), so they take no session
and no CSRF token; an endpoint that needs a credential checks it in ``auth``.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from ..protocol import storable
from ..protocol.errors import MalformedMessage
from ..protocol.sse import CONTENT_TYPE, encode_event
from ..protocol.wire import parse_run_input
from .agent import Agent
from .driver import run


def refusal(status: int, code: str, message: str, **details) -> JsonResponse:
    """A 4xx JSON body in the shape every Countersign API refusal has."""
    return JsonResponse({"code": code, "message": message, **details}, status=status)


def agent_view(agent: Agent, auth: Callable[[HttpRequest], bool] | None = None):
    """An async Django view that runs ``agent`` once per POSTed RunAgentInput.

    A body that is not a valid RunAgentInput gets a 400 JSON body naming the
    problem (``code``, ``message``, ``field``) and never reaches the agent.
    """

    @csrf_exempt
    @login_not_required
    async def view(request: HttpRequest):
        if request.method != "POST":
            response = refusal(405, "METHOD_NOT_ALLOWED", "POST a RunAgentInput as JSON.")
            response["Allow"] = "POST"
            return response
        if auth is not None and not auth(request):
            return refusal(401, "UNAUTHORIZED", "This agent needs a valid credential.")
        if request.content_type != "application/json":
            return refusal(
                415,
                "UNSUPPORTED_MEDIA_TYPE",
                f"Send the RunAgentInput as application/json, not {request.content_type or 'no content type'}.",
            )
        try:
            body = request.body
        except RequestDataTooBig:
            return refusal(413, "TOO_LARGE", "The request body is larger than this server accepts.")
        try:
            run_input = parse_run_input(body)
        except MalformedMessage as problem:
            return refusal(400, problem.code, problem.message, **problem.details)
        refused = storable.problem(run_input.model_dump(), "The RunAgentInput")  # text no encoder can send back
        if refused is not None:
            return refusal(400, refused.code, refused.message, **refused.details)

        async def stream():
            async for event in run(agent, run_input):
                yield encode_event(event)

        response = StreamingHttpResponse(stream(), content_type=CONTENT_TYPE)
        response["Cache-Control"] = "no-cache"
        # Proxies such as nginx would otherwise hold events back in a buffer.
        response["X-Accel-Buffering"] = "no"
        return response

    view.agent = agent
    return view
