"""The AG-UI gateway: ``POST /agui/<agent>/``, an AG-UI endpoint in front of any registered agent.

Its refusals and capacity rules are in docs/api.md, "The AG-UI gateway": JSON (``hub.refusals``)
before a stream starts, RUN_STARTED then RUN_ERROR with the code after.
"""

from __future__ import annotations

import asyncio
import json
import time

from ag_ui.core import CustomEvent, RunErrorEvent, RunStartedEvent
from ag_ui.core.version import PROTOCOL_VERSION
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from .hub import accept, refusals, supervisor, tokens
from .hub.refusals import Refusal
from .hub.tokens import FailedTokenThrottle, too_many_failures
from .models import Agent, Event, Run
from .protocol import dialects, storable
from .protocol.errors import MalformedMessage, ProtocolError
from .protocol.sse import CONTENT_TYPE, encode_event, format_frame
from .protocol.wire import dump, parse_run_input

# How often a replay of a run still streaming elsewhere looks for new events.
REPLAY_POLL_SECONDS = 0.2


async def _user(request: HttpRequest):
    """The caller by token or by session with a valid CSRF token; None; or a 429 after too many wrong tokens."""
    # The API's throttle, shared: a token cannot be guessed faster through this door than through /api/.
    header = request.headers.get("Authorization", "")
    if header.startswith(("Token ", "Bearer ")):
        throttle = FailedTokenThrottle()
        wait = await sync_to_async(throttle.wait_before_next)(request)
        if wait is not None:
            return refusal(429, "THROTTLED", too_many_failures(wait), retry_after=wait)
        key = header.split(" ", 1)[1].strip()
        user = await sync_to_async(tokens.user_for)(key)
        if user is not None:
            return user
        await sync_to_async(throttle.record_failure)()
        return None
    user = await request.auser()
    if not user.is_authenticated:
        return None
    # A session is a browser's: hold it to CSRF like any form post.
    check = CsrfViewMiddleware(lambda r: None)
    if check.process_view(request, None, (), {}) is not None:
        return None
    return user


def refusal(status: int, code: str, detail: str, **details) -> HttpResponse:
    """A refusal before any stream starts: JSON, in the body every HTTP surface refuses with."""
    return refusals.json_response(refusals.refused(status, code, detail, **details))


def _sse(stream):
    response = StreamingHttpResponse(stream, content_type=CONTENT_TYPE)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


#: The CUSTOM event that tells a gateway client what Countersign left out of its input (AG-UI 1.0 P16, P17).
WARNING_EVENT = "countersign:warning"


def _started(thread_id: str, run_id: str) -> str:
    # Countersign's own RUN_STARTED, so its own version (P64); an agent's is forwarded as it is (P66).
    return encode_event(RunStartedEvent(thread_id=thread_id, run_id=run_id, protocol_version=PROTOCOL_VERSION,
                                        timestamp=int(time.time() * 1000)))


async def _refused(thread_id: str, run_id: str, problem: ProtocolError):
    now = int(time.time() * 1000)
    yield _started(thread_id, run_id)
    yield encode_event(RunErrorEvent(code=problem.code, message=problem.message, timestamp=now))


def _frame(payload: dict) -> str:
    # The events exactly as recorded (as the agent sent them, or Countersign's own RUN_ERROR).
    return format_frame(json.dumps(payload, ensure_ascii=False, separators=(",", ":")))


class _AsRead:
    """The events of one run as its agent's dialect reads them: the terminal event as the hub recorded it.

    A LangGraph ``on_interrupt`` pause ends with a bare RUN_FINISHED; the client gets the
    interrupt outcome Countersign raised instead, with the ids a resume names.
    """

    def __init__(self, dialect: dialects.Dialect, run_id: str) -> None:
        self.dialect, self.run_id, self.customs = dialect, run_id, []

    def __call__(self, payload: dict) -> dict:
        if self.dialect.keeps(payload):
            self.customs.append(payload)
        elif payload.get("type") == "RUN_FINISHED" and payload.get("runId") == self.run_id:
            return self.dialect.terminal(payload, self.customs, self.run_id)
        return payload


class _ForClient:
    """The events of one run as the gateway's client gets them (``_AsRead``), as frames, opening with RUN_STARTED.

    A run that ended before its agent started it holds only Countersign's RUN_ERROR; the client's
    run did start, here, so it opens with RUN_STARTED as a contract refusal does (``_refused``).
    """

    def __init__(self, agent: Agent, thread_id: str, run_id: str, warnings: tuple[str, ...] = ()) -> None:
        # Every dialect may read the end anew: the default one detects LangGraph's on_interrupt.
        self.read = _AsRead(dialects.for_agent(agent.dialect, agent.paused_as), run_id)
        self.thread_id, self.run_id, self.opened = thread_id, run_id, False
        self.warnings = warnings

    def __call__(self, payload: dict) -> str:
        frames = ""
        if not self.opened:
            self.opened = True
            if payload.get("type") != "RUN_STARTED":
                frames = _started(self.thread_id, self.run_id)
            elif self.warnings:
                frames = _frame(self.read(payload))
                payload = None
            # What Countersign left out of the client's input, said once the run has
            # started (a stream opens with RUN_STARTED): a CUSTOM event of its own.
            for warning in self.warnings:
                frames += encode_event(CustomEvent(name=WARNING_EVENT,
                                                   value={"code": "UNRECOGNISED_RESUME_ENTRY", "message": warning}))
            if payload is None:
                return frames
        return frames + _frame(self.read(payload))


async def _faults_end(stream, thread_id: str, run_id: str):
    """``stream``, ended by a RUN_ERROR with the fault's code if the database fails while it reads."""
    started = False
    try:
        async for frame in stream:
            started = True
            yield frame
    except DatabaseError as problem:
        if (fault := refusals.database_fault(problem)) is None:
            raise
        if not started:
            yield _started(thread_id, run_id)
        yield encode_event(RunErrorEvent(code=fault.code, message=fault.message, timestamp=int(time.time() * 1000)))


async def _live(listener: asyncio.Queue, client: _ForClient):
    while True:
        item = await listener.get()
        if item is None:
            return
        yield client(item[1])


async def _replay(run: Run, client: _ForClient):
    """The recorded events of ``run``, following it to its end if it still streams."""
    after = 0
    while True:
        events = [
            (e.seq, e.payload, e.from_agent)
            async for e in Event.objects.filter(run=run, seq__gt=after).order_by("seq").only(
                "seq", "payload", "from_agent")
        ]
        for seq, payload, from_agent in events:
            after = seq
            if not from_agent and payload.get("type") == "CUSTOM":
                # Countersign's own notes (a delivery retry, a refused answer settled)
                # are the log's, not the run's: the client's stream stays the run's
                # events, which ag-ui-validate holds to the lifecycle.
                continue
            yield client(payload)
        status = await Run.objects.values_list("status", flat=True).aget(pk=run.pk)
        if status not in (Run.Status.QUEUED, Run.Status.STREAMING) and not events:
            return
        if not events:
            await asyncio.sleep(REPLAY_POLL_SECONDS)


@csrf_exempt  # checked in _user for session callers; tokens carry no ambient authority
@login_not_required  # answered with 401 JSON, not a redirect to a login page
async def agui(request: HttpRequest, agent: str):
    if request.method != "POST":
        return refusal(405, "METHOD_NOT_ALLOWED", "POST a RunAgentInput as JSON.", headers={"Allow": "POST"})
    user = await _user(request)
    if isinstance(user, HttpResponse):
        return user
    if user is None:
        return refusal(401, "UNAUTHORIZED",
                       "Log in, or send 'Authorization: Token <key>' (manage.py tokens create <user>).")
    # A body that says it is something else is refused; one that says nothing is read as JSON.
    if request.content_type not in ("application/json", ""):
        return refusal(415, "UNSUPPORTED_MEDIA_TYPE",
                       f"Send the RunAgentInput as application/json, not {request.content_type}.")
    registered = await Agent.objects.filter(name=agent).afirst()
    if registered is None:
        return refusal(404, "UNKNOWN_AGENT", f"No agent named {agent!r} is registered.")
    try:
        body = request.body
        # Its size was bounded as it was read (COUNTERSIGN_MAX_REQUEST_BYTES, 413): not again, lower.
        run_input = parse_run_input(body, max_bytes=max(len(body), 1))
    except RequestDataTooBig:
        return refusal(413, "TOO_LARGE", "The request body is larger than this server accepts "
                                         "(COUNTERSIGN_MAX_REQUEST_BYTES).")
    except MalformedMessage as problem:
        return refusals.json_response(refusals.render(problem, status=400))
    # What the database cannot hold (PostgreSQL refuses NUL) is refused here, on every database alike;
    # a lone surrogate is looked for in the body as sent, since the model cannot even be dumped with one.
    text = body.decode("utf-8", "replace")
    refused = storable.problem(json.loads(text), "The RunAgentInput") if storable.needs_check(text) else None
    refused = refused or storable.problem(dump(run_input), "The RunAgentInput")
    if refused is not None:
        return refusals.json_response(refusals.render(refused, status=400))

    background = supervisor.ensure()
    # Held before anything is recorded, so a full process refuses without a trace;
    # a resume may use the slots kept for resumes.
    slot = await background.reserve(resume=bool(run_input.resume))
    if slot is None:
        return _sse(_refused(run_input.thread_id, run_input.run_id, Refusal(
            "AT_CAPACITY", f"This Countersign process already streams {settings.COUNTERSIGN_MAX_STREAMS} runs "
                           "(COUNTERSIGN_MAX_STREAMS, some kept for resumes): try again shortly.")))
    try:
        accepted = await sync_to_async(accept.accept_input)(registered, run_input, user, background.worker)
    except ProtocolError as problem:
        background.release(slot)
        return _sse(_refused(run_input.thread_id, run_input.run_id, problem))
    except DatabaseError as problem:
        background.release(slot)
        if (fault := refusals.database_fault(problem)) is None:
            raise
        # Nothing was recorded (the transaction rolled back): the client may send the same input again.
        return _sse(_refused(run_input.thread_id, run_input.run_id, fault))
    except BaseException:
        background.release(slot)
        raise
    if accepted.run is None:
        background.release(slot)  # a quorum still short of approvals: nothing is sent to the agent yet
        return _sse(_refused(run_input.thread_id, run_input.run_id, Refusal(
            "AWAITING_APPROVALS",
            "Your answers are recorded, but the policy requires approvals from more reviewers: Countersign "
            "sends the resume to the agent when they approve in its inbox.")))
    if accepted.verdict.kind == "replay":
        background.release(slot)  # nothing is sent to the agent
        return _sse(_faults_end(_replay(accepted.run, _ForClient(registered, run_input.thread_id, accepted.run.run_id)),
                                run_input.thread_id, accepted.run.run_id))
    listener: asyncio.Queue = asyncio.Queue()
    # Streamed by the supervisor, not this request: if the client goes away
    # the run is still recorded to its end. The slot is freed when it ends.
    background.stream(accepted.run.pk, listener, slot=slot)
    return _sse(_live(listener, _ForClient(registered, run_input.thread_id, accepted.run.run_id,
                                           accepted.verdict.warnings)))


@csrf_exempt  # a refusal, whoever asks; it changes nothing
@login_not_required
async def no_such_endpoint(request: HttpRequest):
    """Any other path under /agui/: a JSON 404 naming the right shape, not Django's HTML page."""
    return refusal(404, "NOT_FOUND", f"No AG-UI endpoint at {request.path}: POST a RunAgentInput to "
                                     "/agui/<agent>/, with the agent's registered name and the trailing slash.")
