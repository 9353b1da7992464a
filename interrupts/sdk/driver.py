"""Run an ``Agent`` on one ``RunAgentInput`` and stream the AG-UI events it produces.

The driver owns the run's frame so agent authors cannot get it wrong:
RUN_STARTED first; the state and messages snapshots before an interrupt
outcome (the spec's state-at-the-boundary rule); exactly one terminal event,
RUN_FINISHED or RUN_ERROR with a code, whatever the agent did.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
)

from .agent import Agent, AgentError, InvalidOutcome, RunOutcome
from .context import RunContext
from .verify import attested_approvals

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
    """Stream the events of one run of ``agent``, ending in RUN_FINISHED or RUN_ERROR.

    Events are yielded as the agent emits them, not after it returns. An
    exception in the agent becomes RUN_ERROR ``AGENT_ERROR`` (or the code of
    an ``AgentError``); an outcome the protocol forbids becomes RUN_ERROR
    ``PROTOCOL``; an answer that fails an ``InterruptDefinition``'s schema
    becomes RUN_ERROR ``INVALID_RESUME``.

    ``attested``: the request's Countersign-Signature checked (see
    ``verify.check_signature``). Each resume entry's fingerprint is then
    checked before the agent runs (RUN_ERROR ``BAD_FINGERPRINT``), and
    ``ctx.approvals_for`` answers with the attested approvers.
    """
    queue: asyncio.Queue = asyncio.Queue()

    async def drive() -> BaseEvent:
        try:
            approvals = attested_approvals(run_input, agent.tool_call_ids_for) if attested else None
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
