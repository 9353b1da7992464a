"""The gateway's use case: hold a client's RunAgentInput to the contract, record it, or replay it.

Above ``runs`` (the thread gate, queueing) and ``decisions`` (a resume's
answers are decisions): the gateway calls ``accept_input`` and streams the run
it returns; neither module below knows the gateway exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from ag_ui.core import ResumeEntry, RunAgentInput
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ..models import Agent, Interrupt, Run, Thread
from ..protocol import dialects
from ..protocol.contract import Verdict, check_input
from ..protocol.contract.echoes import without_echoes
from ..protocol.contract.history import Proposal, check_length, resume_messages
from ..protocol.wire import dump
from . import decisions, events, outbox, runs
from .refusals import Refusal


@dataclass(frozen=True)
class Accepted:
    """What the gateway does with an input: stream ``run`` (new or resume), or replay it.

    ``run`` is None for a resume whose approvals were recorded but do not
    yet complete the batch (a quorum): nothing is sent to the agent yet.
    """

    verdict: Verdict
    run: Run | None


#: What a gateway client's resume may set in the input sent to the agent: its own
#: runtime (tools, context, forwardedProps). The rest is Countersign's record.
CLIENT_RESUME_FIELDS = ("tools", "context", "forwardedProps")

# How often the gateway checks a resume again when the thread changed between
# the check (outside the lock) and the record (under it): a busy thread, not a
# retry loop that can spin.
ACCEPT_ATTEMPTS = 3


def accept_input(agent: Agent, run_input: RunAgentInput, user, worker: str) -> Accepted:
    """Hold a client's RunAgentInput to the contract and record it as a run of this process.

    A resume's answers become decisions by ``user``, racing the inbox fairly
    (the loser gets ALREADY_RESOLVED); a replay returns the run it started.
    Everything is checked before the transaction; under the lock only
    ``gate_fingerprint`` confirms the thread is unchanged, else the check runs
    again (THREAD_BUSY after ``ACCEPT_ATTEMPTS``). A refused input leaves
    nothing behind. Refusal codes: docs/internals/decisions.md, "Gateway input".
    """
    runs.check_id("threadId", run_input.thread_id)
    runs.check_id("runId", run_input.run_id)
    runs.refuse_steering(run_input.forwarded_props)
    check_length(run_input.messages)
    for _attempt in range(ACCEPT_ATTEMPTS):
        existing = Thread.objects.filter(thread_id=run_input.thread_id).select_related("agent").first()
        if existing is not None and existing.agent_id != agent.pk:
            runs.thread_for(agent, run_input.thread_id)  # refuses with AGENT_MISMATCH
        seen = runs.gate_fingerprint(existing)
        verdict = check_input(runs.thread_gate(existing, run_input.thread_id), run_input, timezone.now())
        sent = verdict.applied_to(run_input)  # entries naming no open interrupt left out (AG-UI 1.0 P16, P17)
        prepared = messages = None
        # What the client left out is sent as Countersign sends it in its own inputs.
        wire_input = {**runs.input_defaults(), **dump(sent)}
        if verdict.kind == "resume":
            by_id = {i.interrupt_id: i for i in Interrupt.objects.filter(
                run__thread=existing, run__run_id=verdict.interrupted_run_id).select_related("run")}
            prepared = decisions.prepare_resume(by_id, [_framework_keys_out(e) for e in sent.resume], user)
            for entry in sent.resume:
                # After eligibility: only someone who may answer learns how a copy differs.
                without_echoes(by_id[entry.interrupt_id].raw, entry.status, entry.payload, entry.metadata)
            messages = resume_messages(events.conversation_of(existing)[0], wire_input.get("messages") or [],
                                       _concerned(by_id.values()))
        with transaction.atomic(durable=True):
            thread = runs.thread_for(agent, run_input.thread_id)
            if runs.gate_fingerprint(thread) != seen or (messages is not None and thread.messages != existing.messages):
                continue  # raised, answered or recorded meanwhile: check again against what is there now
            if verdict.kind == "replay":
                return Accepted(verdict, Run.objects.get(thread=thread, run_id=verdict.replay_of_run_id))
            outbox.refuse_if_agent_full(agent)
            if Run.objects.filter(thread=thread, run_id=run_input.run_id).exists():
                raise Refusal(
                    "DUPLICATE_RUN_ID",
                    f"Thread {thread.thread_id} already has a run {run_input.run_id}: use a fresh runId.",
                )
            parent = key = None
            if verdict.kind == "resume":
                parent = Run.objects.select_related("thread").get(thread=thread, run_id=verdict.interrupted_run_id)
                complete = decisions.record_resume(parent, prepared, user)
                # The client's additions (its turns, its own tools' results) are the
                # thread's from now on, as new input's are: a resume the inbox sends
                # later, when a quorum completes, carries them too.
                Thread.objects.filter(pk=thread.pk).update(messages=messages.recorded, folded_seq=F("last_seq"))
                if not complete:
                    return Accepted(verdict, None)
                key, sent = runs.batch_resume_key(parent, verdict.idempotency_key)
                if sent is not None:
                    # These answers already went out (the gate read the thread before
                    # they did): refused whole, nothing recorded and nothing sent twice.
                    raise Refusal("ALREADY_RESOLVED", f"These answers were already sent as run {sent.run_id}.",
                                  run_id=sent.run_id)
                # What the agent receives is Countersign's record, not the client's: the
                # answers, attested, the thread's state as the agent last sent it, and its
                # messages with only what the client added that contradicts nothing
                # (``resume_messages``). A client's own state could otherwise change what
                # an approval makes the agent do (an approval's payload names no args).
                # Only the fields RunAgentInput defines, too: a client's extra keys would
                # travel signed beside the attestation, as if Countersign said them.
                wire_input = {**{k: wire_input[k] for k in CLIENT_RESUME_FIELDS if k in wire_input},
                              "threadId": thread.thread_id, "runId": run_input.run_id,
                              "parentRunId": parent.run_id, "resume": runs.resume_entries(parent),
                              "state": thread.state if thread.state is not None else {},
                              "messages": messages.sent}
                wire_input = runs.dialect_input(parent, wire_input)
            else:
                runs.refuse_if_busy(thread)
                runs.refuse_if_refused(thread)
                # The client's conversation and state are the thread's record from now on
                # (a resume sends the record, and only what the client adds to it).
                recorded = {"messages": wire_input.get("messages") or [], "folded_seq": F("last_seq")}
                if wire_input.get("state") is not None:
                    recorded["state"] = wire_input["state"]
                Thread.objects.filter(pk=thread.pk).update(**recorded)
            run = runs.enqueue(thread, agent, wire_input, user=user, parent=parent, resume_key=key,
                         origin=Run.Origin.GATEWAY, claimed_by=worker)
            return Accepted(verdict, run)
    raise Refusal("THREAD_BUSY", f"Thread {run_input.thread_id} kept changing while this input was checked "
                                 "(interrupts raised or answered meanwhile); send it again.")


def _framework_keys_out(entry: ResumeEntry) -> ResumeEntry:
    """``entry`` without the framework keys Countersign writes itself (``without_echoes`` checks the client's copy)."""
    if not isinstance(entry.metadata, dict) or not dialects.RESERVED_METADATA_KEYS & entry.metadata.keys():
        return entry
    kept = {k: v for k, v in entry.metadata.items() if k not in dialects.RESERVED_METADATA_KEYS}
    return entry.model_copy(update={"metadata": kept})


def _concerned(interrupts) -> dict[str, Proposal]:
    """The tool calls a batch's interrupts concern, by id, as their reviewers were shown them."""
    return {i.tool_call_id: Proposal(i.interrupt_id, i.tool_name or None, i.proposed_args)
            for i in interrupts if i.tool_call_id}
