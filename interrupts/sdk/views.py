"""Serve an ``Agent`` as an AG-UI endpoint: POST RunAgentInput, answer text/event-stream.

The only module of the SDK that knows Django. Agent endpoints are called by
machines (Countersign's hub, curl, any AG-UI client), so they take no session
and no CSRF token; an endpoint that needs a credential checks it in ``auth``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from ..protocol import signing, storable
from ..protocol.errors import MalformedMessage, refusal_body
from ..protocol.sse import CONTENT_TYPE, encode_event
from ..protocol.wire import parse_run_input
from .agent import Agent
from .driver import refused, run
from .verify import BadSignature, check_signature


def refusal(status: int, code: str, detail: str, **details) -> JsonResponse:
    """A 4xx JSON answer with the body every Countersign HTTP refusal has: ``{code, detail, ...}``.

    Built by ``protocol.errors.refusal_body``, as the hub's are (interrupts.hub.refusals),
    so the SDK needs nothing of the hub to answer alike.
    """
    return JsonResponse(refusal_body(code, detail, **details), status=status)


async def _resolved(value):
    if callable(value):
        value = value()
        if inspect.isawaitable(value):
            value = await value
    return value


def agent_view(agent: Agent, auth: Callable[[HttpRequest], bool] | None = None, *,
               signing_secret: Callable[[], str | None | Awaitable[str | None]] | None = None,
               require_signature: Callable[[], bool] | None = None):
    """An async Django view that runs ``agent`` once per POSTed RunAgentInput.

    A body that is not a valid RunAgentInput gets a 400 JSON body naming the
    problem (``code``, ``detail``, ``field``) and never reaches the agent.

    With a signing secret (``agent.signing_secret``, or ``signing_secret()``
    asked on every request, so a rotation takes effect at once) the raw body
    is checked against its ``Countersign-Signature`` before anything else
    reads it: an unsigned (when ``agent.require_signature``, or
    ``require_signature()``, says so), forged or stale request is answered
    with an event stream whose RUN_ERROR has code ``BAD_SIGNATURE``, which
    any AG-UI client shows as the run's failure. A signed resume then has each
    answer's fingerprint checked (``BAD_FINGERPRINT``) before the agent runs.
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
        secret = await _resolved(signing_secret) if signing_secret is not None else agent.signing_secret
        required = await _resolved(require_signature) if require_signature is not None else agent.require_signature
        header = request.headers.get(signing.SIGNATURE_HEADER)
        bad_signature = None
        if secret and (header is not None or required):
            try:
                check_signature(secret, header, body, tolerance=agent.signature_tolerance)
            except BadSignature as problem:
                bad_signature = problem
        elif not secret and require_signature is not None and required:
            # Told to insist, with no secret to check against: refuse rather than answer unverified.
            bad_signature = BadSignature("This agent accepts only signed requests, and has no signing secret set.")
        try:
            run_input = parse_run_input(body)
        except MalformedMessage as problem:
            if bad_signature is not None:
                return _event_stream(refused(None, bad_signature))
            return refusal(400, problem.code, problem.message, **problem.details)
        if bad_signature is not None:
            # Parsed only to name the run in RUN_STARTED: the agent never sees it.
            return _event_stream(refused(run_input, bad_signature))
        unstorable = storable.problem(run_input.model_dump(), "The RunAgentInput")  # text no encoder can send back
        if unstorable is not None:
            return refusal(400, unstorable.code, unstorable.message, **unstorable.details)
        attested = bool(secret) and header is not None
        return _event_stream(run(agent, run_input, attested=attested))

    view.agent = agent
    return view


def _event_stream(events) -> StreamingHttpResponse:
    async def stream():
        async for event in events:
            yield encode_event(event)

    response = StreamingHttpResponse(stream(), content_type=CONTENT_TYPE)
    response["Cache-Control"] = "no-cache"
    # Proxies such as nginx would otherwise hold events back in a buffer.
    response["X-Accel-Buffering"] = "no"
    return response
