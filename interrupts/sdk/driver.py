"""Run an ``Agent`` on one ``RunAgentInput`` and stream the AG-UI events it produces.

The driver owns the run's frame so agent authors cannot get it wrong:
RUN_STARTED first; the state and messages snapshots before an interrupt
outcome (the spec's state-at-the-boundary rule); exactly one terminal event,
RUN_FINISHED or RUN_ERROR with a code, whatever the agent did.

It also owns what an agent endpoint does with one HTTP request (``respond``),
so every server adapter (``asgi``, the app's Django view) answers alike.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
)
from ag_ui.core.version import PROTOCOL_VERSION

from ..protocol import storable
from ..protocol.errors import MalformedMessage, refusal_body
from ..protocol.sse import CONTENT_TYPE, encode_event
from ..protocol.wire import parse_run_input
from .agent import Agent, AgentError, InvalidOutcome, RunOutcome
from .context import RunContext
from .dedupe import handled_runs
from .verify import BadSignature, attested_approvals, check_signature

logger = logging.getLogger(__name__)

# The message of an unexpected exception reaches the client; bound it so a
# huge repr cannot flood the stream.
MAX_ERROR_MESSAGE = 2000

_DONE = object()


def _stamped(event: BaseEvent) -> BaseEvent:
    # Timestamps let readers order and time events across reconnects.
    if event.timestamp is None:
        event.timestamp = int(time.time() * 1000)
    return event


def _error(code: str, message: str) -> RunErrorEvent:
    return RunErrorEvent(code=code, message=message[:MAX_ERROR_MESSAGE] or code)


def _started(run_input: RunAgentInput) -> BaseEvent:
    return _stamped(
        RunStartedEvent(
            thread_id=run_input.thread_id,
            run_id=run_input.run_id,
            parent_run_id=run_input.parent_run_id,
            # Its own version, never an echo of the input's (AG-UI 1.0 P64).
            protocol_version=PROTOCOL_VERSION,
        )
    )


async def refused(run_input: RunAgentInput | None, error: AgentError) -> AsyncIterator[BaseEvent]:
    """The stream of a run refused before the agent's code ran: RUN_STARTED, then RUN_ERROR ``error.code``.

    Without an input (the body did not parse) there is no run to start, and
    the stream is the RUN_ERROR alone.
    """
    if run_input is not None:
        yield _started(run_input)
    yield _stamped(_error(error.code, error.message))


async def run(agent: Agent, run_input: RunAgentInput, *, attested: bool = False) -> AsyncIterator[BaseEvent]:
    """Stream one run's events as the agent emits them, ending in RUN_FINISHED or RUN_ERROR.

    RUN_ERROR codes: ``AGENT_ERROR`` (or an ``AgentError``'s own), ``PROTOCOL``
    (a forbidden outcome), ``INVALID_RESUME``, and with ``attested`` (the
    request's signature checked) ``BAD_FINGERPRINT``, before the agent runs.
    """
    queue: asyncio.Queue = asyncio.Queue()

    async def drive() -> BaseEvent:
        try:
            approvals = (attested_approvals(run_input, agent.tool_call_ids_for,
                                            require_passkey=agent.require_passkey) if attested else None)
            ctx = RunContext(run_input, queue.put_nowait, approvals)
            outcome = await agent.run(ctx)
            if not isinstance(outcome, RunOutcome):
                raise InvalidOutcome(
                    f"{type(agent).__name__}.run returned {type(outcome).__name__}, not a RunOutcome."
                )
            outcome.validate()
        except AgentError as error:
            return _error(error.code, error.message)
        except Exception as error:  # the agent's bug must not become a hung or silent run
            logger.exception("agent %s failed", type(agent).__name__)
            return _error("AGENT_ERROR", f"{type(error).__name__}: {error}")
        if outcome.type == "interrupt":
            ctx.snapshot_state()
            ctx.snapshot_messages()
            return RunFinishedEvent(
                thread_id=ctx.thread_id,
                run_id=ctx.run_id,
                outcome=RunFinishedInterruptOutcome(interrupts=list(outcome.interrupts)),
            )
        return RunFinishedEvent(
            thread_id=ctx.thread_id,
            run_id=ctx.run_id,
            result=outcome.result,
            outcome=RunFinishedSuccessOutcome(),
        )

    yield _started(run_input)
    task = asyncio.ensure_future(drive())
    task.add_done_callback(lambda _: queue.put_nowait(_DONE))
    try:
        while True:
            item = await queue.get()
            if item is _DONE:
                break
            yield _stamped(item)
        # Events emitted after the agent returned (the boundary snapshots)
        # are already queued ahead of _DONE; the terminal event comes last.
        yield _stamped(task.result())
    finally:
        if not task.done():
            # The client went away mid-run: stop the agent too.
            task.cancel()


# --- One HTTP request to an agent endpoint, whatever server receives it ----------------

#: Bytes a request body may have, for a server with no bound of its own (the
#: ASGI app): the hub's COUNTERSIGN_MAX_REQUEST_BYTES default, which a Django
#: view gets as DATA_UPLOAD_MAX_MEMORY_SIZE. The SDK cannot read interrupts/conf.py
#: (it knows no Django), so tests/sdk/test_asgi.py holds the two equal.
MAX_REQUEST_BYTES = 16 * 1024 * 1024

#: An event-stream answer's headers. No caching, and no buffering: proxies
#: such as nginx would otherwise hold events back.
STREAM_HEADERS = {"Content-Type": CONTENT_TYPE, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

#: Seconds a server built on the driver waits for a request's whole body: a
#: client trickling it a byte at a time must not hold the agent's server for
#: ever (uvicorn itself has no body timeout). Answered 408 ``REQUEST_TIMEOUT``.
BODY_READ_SECONDS = 30.0


class BodyTooLarge(Exception):
    """Raised by a server's ``read_body``: the body passes the server's bound (413 ``TOO_LARGE``)."""


class BodyTooSlow(Exception):
    """Raised by a server's ``read_body``: the body did not arrive in time (408 ``REQUEST_TIMEOUT``)."""


@dataclass(frozen=True)
class Refusal:
    """A 4xx JSON answer, with the body every Countersign HTTP refusal has: ``{code, detail, ...}``.

    Built by ``protocol.errors.refusal_body``, as the hub's are
    (interrupts.hub.refusals), so the SDK needs nothing of the hub to answer alike.
    """

    status: int
    body: dict
    headers: Mapping[str, str] = field(default_factory=dict)


def refusal(status: int, code: str, detail: str, *, headers: Mapping[str, str] | None = None, **details) -> Refusal:
    return Refusal(status, refusal_body(code, detail, **details), dict(headers or {}))


async def _resolved(value):
    if callable(value):
        value = value()
        if inspect.isawaitable(value):
            value = await value
    return value


def media_type(header: str | None) -> str:
    """The media type of a Content-Type header, without its parameters (``charset``): case does not count."""
    return (header or "").split(";", 1)[0].strip().lower()


async def sse(events: AsyncIterator[BaseEvent]) -> AsyncIterator[bytes]:
    """``events`` as the bytes of a ``text/event-stream``, one frame each, as the agent emits them."""
    async for event in events:
        yield encode_event(event).encode()


async def respond(agent: Agent, *, method: str, content_type: str | None, signature: str | None,
                  read_body: Callable[[], Awaitable[bytes]], authorized: Callable[[], object] | None = None,
                  signing_secret: Callable[[], str | None | Awaitable[str | None]] | None = None,
                  require_signature: Callable[[], bool] | None = None) -> Refusal | AsyncIterator[bytes]:
    """The answer to one request: a ``Refusal``, or the event stream's bytes (``STREAM_HEADERS``, status 200).

    Checked in order: method (405), ``authorized`` (401), content type (415),
    ``read_body`` (413, 408), the signature, the body (400). A request unsigned
    (when required), forged or stale gets a stream ending in RUN_ERROR
    ``BAD_SIGNATURE``, not a 4xx, so any AG-UI client shows the run failed. ``signing_secret()`` is asked
    on every request, so a rotation applies at once.
    """
    if method != "POST":
        return refusal(405, "METHOD_NOT_ALLOWED", "POST a RunAgentInput as JSON.", headers={"Allow": "POST"})
    if authorized is not None and not await _resolved(authorized):
        return refusal(401, "UNAUTHORIZED", "This agent needs a valid credential.")
    kind = media_type(content_type)
    if kind != "application/json":
        return refusal(
            415,
            "UNSUPPORTED_MEDIA_TYPE",
            f"Send the RunAgentInput as application/json, not {kind or 'no content type'}.",
        )
    try:
        body = await read_body()
    except BodyTooLarge:
        return refusal(413, "TOO_LARGE", "The request body is larger than this server accepts.")
    except BodyTooSlow:
        return refusal(408, "REQUEST_TIMEOUT", "The request body did not arrive in time; send it again, whole.")
    secret = await _resolved(signing_secret) if signing_secret is not None else agent.signing_secret
    required = await _resolved(require_signature) if require_signature is not None else agent.require_signature
    bad_signature = None
    if secret and (signature is not None or required):
        try:
            check_signature(secret, signature, body, tolerance=agent.signature_tolerance)
        except BadSignature as problem:
            bad_signature = problem
    elif not secret and require_signature is not None and required:
        # Told to insist, with no secret to check against: refuse rather than answer unverified.
        bad_signature = BadSignature("This agent accepts only signed requests, and has no signing secret set.")
    try:
        # Its size was bounded as it was read (413 past the bound): parsing does not bound it again, lower.
        run_input = parse_run_input(body, max_bytes=max(len(body), 1))
    except MalformedMessage as problem:
        if bad_signature is not None:
            return sse(refused(None, bad_signature))
        return refusal(400, problem.code, problem.message, **problem.details)
    if bad_signature is not None:
        # Parsed only to name the run in RUN_STARTED: the agent never sees it.
        return sse(refused(run_input, bad_signature))
    unstorable = storable.problem(run_input.model_dump(), "The RunAgentInput")  # text no encoder can send back
    if unstorable is not None:
        return refusal(400, unstorable.code, unstorable.message, **unstorable.details)
    attested = bool(secret) and signature is not None
    if agent.remember_runs > 0:
        # A runId it has handled is answered with what it produced, not run again.
        # The same request, byte for byte (Countersign re-sends the very bytes), and as verified.
        key = (run_input.thread_id, run_input.run_id, hashlib.sha256(body).hexdigest(), attested)
        return handled_runs(agent).answer(key, lambda: run(agent, run_input, attested=attested))
    return sse(run(agent, run_input, attested=attested))
