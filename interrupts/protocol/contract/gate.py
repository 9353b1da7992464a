"""Rules 1-5 of the interrupt contract, as AG-UI 1.0 states them: may this input run, and what is it?

New input, a resume or a replay of one.

``check_input`` reads a ``RunAgentInput`` against the thread as the hub knows
it (``ThreadGate``) and returns a ``Verdict``; each resume entry is then held
to rules 6-8 by ``answers.check_entry``. Pure: the caller passes ``now``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ag_ui.core import Interrupt, ResumeEntry, RunAgentInput

from ..errors import ContractViolation
from .answers import _ids, _require_aware, check_entry

# --------------------------------------------------------------------------- #
# Idempotency (rule 5)
# --------------------------------------------------------------------------- #


def _canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, compact, unescaped Unicode.

    ``json`` keeps ``true`` and ``1`` apart (and ``1`` and ``1.0``), so answers
    Python would call equal still get different keys: the conservative side,
    since a "different" answer is refused rather than silently deduplicated.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def idempotency_key(thread_id: str, entries: Iterable[ResumeEntry]) -> str:
    """A stable SHA-256 hex digest of ``(thread_id, {(interruptId, status, payload)})``.

    Rule 5's key: entry order and entry ``metadata`` are not part of it (metadata
    is an envelope, such as a signature that may differ between retries), the
    payload is compared as canonical JSON, and an absent payload equals ``null``.
    Two resumes with the same key are the same answer and must be dispatched to
    the agent once.
    """
    triples = sorted((e.interrupt_id, e.status, _canonical(e.payload)) for e in entries)
    # One JSON document for the whole key, so no choice of ids or payloads can
    # make two different batches serialise to the same bytes.
    document = _canonical([thread_id, [list(t) for t in triples]])
    # surrogatepass: a payload string with a lone surrogate is legal in Python
    # (and in JSON escapes) but not encodable as strict UTF-8.
    return hashlib.sha256(document.encode("utf-8", "surrogatepass")).hexdigest()


# --------------------------------------------------------------------------- #
# The thread gate (rules 1-5, then per entry 6-8)
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class ThreadGate:
    """One thread as the hub knows it when an input arrives.

    ``open_interrupts`` are the interrupts still awaiting an answer, all from the
    run ``open_run_id`` that ended with them (empty and ``None`` when nothing is
    pending). ``last_resume`` is the last resume batch the hub accepted on this
    thread, sent as run ``last_resume_run_id``: it is what a replay is compared
    with. Only that last batch is remembered, so an answer to an interrupt
    resolved two resumes ago reads as ``UNKNOWN_INTERRUPT``.

    Sequences are stored as tuples so a gate can be shared without being mutated.
    """

    thread_id: str
    open_run_id: str | None = None
    open_interrupts: tuple[Interrupt, ...] = ()
    last_resume: tuple[ResumeEntry, ...] = ()
    last_resume_run_id: str | None = None
    pending_tool_calls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Freeze list arguments into tuples."""
        object.__setattr__(self, "open_interrupts", tuple(self.open_interrupts))
        object.__setattr__(self, "last_resume", tuple(self.last_resume))
        object.__setattr__(self, "pending_tool_calls", tuple(self.pending_tool_calls))


@dataclass(frozen=True)
class Verdict:
    """What an accepted ``RunAgentInput`` is.

    * ``kind="new"`` - fresh input on a thread with nothing pending.
    * ``kind="resume"`` - answers every open interrupt of ``interrupted_run_id``;
      ``idempotency_key`` identifies the answer so it is dispatched once.
    * ``kind="replay"`` - identical (rule 5) to the resume already accepted as
      run ``replay_of_run_id``; do not dispatch it again.
    """

    kind: Literal["new", "resume", "replay"]
    interrupted_run_id: str | None = None
    replay_of_run_id: str | None = None
    idempotency_key: str | None = field(default=None)
    #: Entries that named no open interrupt, left out (P16, P17), and what the client is told about them.
    unrecognised: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def applied_to(self, run_input: RunAgentInput) -> RunAgentInput:
        """``run_input`` without the entries this verdict left out: what goes on toward the agent."""
        if not self.unrecognised:
            return run_input
        kept = [e for e in run_input.resume or () if e.interrupt_id not in self.unrecognised]
        return run_input.model_copy(update={"resume": kept or None})


def check_input(gate: ThreadGate, run_input: RunAgentInput, now: datetime) -> Verdict:
    """Classify *run_input* on the thread described by *gate*, or refuse it.

    Rules, in this order (the first failure is raised as ``ContractViolation``):

    1. ``THREAD_MISMATCH`` - the input is for another thread.
    5. An input whose resume has the same ``idempotency_key`` as
       ``gate.last_resume`` is a ``"replay"`` (not refused, not re-checked:
       it was valid when accepted). A resume answering interrupts of that
       accepted batch differently is refused with ``ALREADY_RESOLVED``.
    -  An entry naming no open interrupt is left out, not refused (AG-UI 1.0
       P16; on a thread with nothing open, every entry, P17): the verdict
       lists it in ``unrecognised`` with a warning for the client, and
       ``Verdict.applied_to`` removes it from the input.
    4. ``PENDING_INTERRUPTS`` - interrupts are open and the input has no (or an
       empty) resume.
    -  ``UNANSWERED_TOOL_CALLS`` - new input that does not answer the tool
       calls the thread's last run left to its client (C23).
    -  ``DUPLICATE_ENTRY`` - one interrupt answered twice in the same resume.
    3. ``INCOMPLETE_RESUME`` - open interrupts left unanswered (partial
       resumes are not supported; P19 lets a producer refuse them).
    6-8. ``check_entry`` for each entry, in input order.

    ``parentRunId`` is deliberately not checked: the spec keeps it orthogonal
    to resume linkage (rule 2). *now* must be timezone-aware.
    """
    _require_aware(now)

    # Rule 1.
    if run_input.thread_id != gate.thread_id:
        raise ContractViolation(
            "THREAD_MISMATCH",
            f"Run {run_input.run_id} is for thread {run_input.thread_id} but was sent to thread "
            f"{gate.thread_id}; send it on its own thread.",
            expected_thread_id=gate.thread_id,
            thread_id=run_input.thread_id,
        )

    entries = tuple(run_input.resume or ())
    open_by_id = {i.id: i for i in reversed(gate.open_interrupts)}  # reversed: first wins
    open_ids = list(dict.fromkeys(i.id for i in gate.open_interrupts))

    # Rule 5 comes before the pending/linkage checks: once a resume is
    # accepted its interrupts are no longer open, so a retried identical
    # resume would otherwise be refused as UNKNOWN_INTERRUPT/NOTHING_TO_RESUME.
    if entries and gate.last_resume:
        key = idempotency_key(gate.thread_id, entries)
        if key == idempotency_key(gate.thread_id, gate.last_resume):
            return Verdict("replay", replay_of_run_id=gate.last_resume_run_id, idempotency_key=key)
        answered = {e.interrupt_id for e in gate.last_resume}
        # An id open again (an agent reusing ids across runs) is answerable, not resolved.
        already = [i for i in dict.fromkeys(e.interrupt_id for e in entries) if i in answered and i not in open_by_id]
        if already:
            by = f" by run {gate.last_resume_run_id}" if gate.last_resume_run_id else ""
            raise ContractViolation(
                "ALREADY_RESOLVED",
                f"Interrupt(s) {_ids(already)} on thread {gate.thread_id} were already answered{by}, and this "
                "resume is not identical to that answer; only an identical resume can be replayed.",
                interrupt_ids=already,
                **({"interrupt_id": already[0]} if len(already) == 1 else {}),
            )

    # P16, P17: an entry naming no open interrupt is one Countersign, the
    # producer toward this client, does not recognise: dropped, with a warning.
    unrecognised = tuple(dict.fromkeys(e.interrupt_id for e in entries if e.interrupt_id not in open_by_id))
    entries = tuple(e for e in entries if e.interrupt_id in open_by_id)
    warnings = (_unrecognised_warning(gate, unrecognised),) if unrecognised else ()

    # Rule 4.
    if not entries and not open_ids:
        check_tool_answers(gate, run_input)
        return Verdict("new", unrecognised=unrecognised, warnings=warnings)
    if not entries and not unrecognised:
        raise ContractViolation(
            "PENDING_INTERRUPTS",
            f"Thread {gate.thread_id} is waiting on interrupt(s) {_ids(open_ids)} from run "
            f"{gate.open_run_id}; answer each of them (resolved or cancelled) in resume before "
            "sending new input.",
            interrupt_ids=open_ids,
            interrupted_run_id=gate.open_run_id,
        )

    check_coverage(open_ids, entries, gate.open_run_id, gate.thread_id)

    # Rules 6, 7, 8 and the per-entry envelope checks.
    for entry in entries:
        check_entry(open_by_id[entry.interrupt_id], entry, now)

    return Verdict(
        "resume",
        interrupted_run_id=gate.open_run_id,
        idempotency_key=idempotency_key(gate.thread_id, entries),
        unrecognised=unrecognised,
        warnings=warnings,
    )


def check_coverage(interrupt_ids: Iterable[str], entries: Iterable[ResumeEntry], run_id: str | None = None,
                   thread_id: str = "") -> None:
    """Refuse a resume that does not answer each of ``interrupt_ids`` exactly once (C14, C15, P19).

    ``DUPLICATE_ENTRY``: one interrupt answered twice. ``UNKNOWN_INTERRUPT``:
    an entry for none of them (C12; the gateway drops such entries before,
    P16). ``INCOMPLETE_RESUME``: an interrupt left out; leaving one out is not
    abandoning it, only a ``cancelled`` entry is. Countersign holds every
    resume it sends to this before sending it, and a client's before its run.
    """
    expected = list(dict.fromkeys(interrupt_ids))
    seen: set[str] = set()
    for entry in entries:
        if entry.interrupt_id in seen:
            raise ContractViolation(
                "DUPLICATE_ENTRY",
                f"Interrupt {entry.interrupt_id} is answered more than once in this resume; send exactly "
                "one entry per interrupt.",
                interrupt_id=entry.interrupt_id,
            )
        seen.add(entry.interrupt_id)
    unknown = [i for i in seen if i not in expected]
    if unknown:
        of = f" of run {run_id}" if run_id else ""
        raise ContractViolation(
            "UNKNOWN_INTERRUPT",
            f"Resume entr{'y' if len(unknown) == 1 else 'ies'} {_ids(unknown)} "
            f"reference{'s' if len(unknown) == 1 else ''} no open interrupt{of}; the open interrupts are "
            f"{_ids(expected)}.",
            interrupt_ids=unknown,
            **({"interrupt_id": unknown[0]} if len(unknown) == 1 else {}),
        )
    missing = [i for i in expected if i not in seen]
    if missing:
        of = f" of run {run_id}" if run_id else ""
        raise ContractViolation(
            "INCOMPLETE_RESUME",
            f"The resume leaves interrupt(s) {_ids(missing)}{of} unanswered; partial "
            "resumes are not supported, answer every open interrupt (resolved or cancelled) at once.",
            interrupt_ids=missing,
            **({"interrupt_id": missing[0]} if len(missing) == 1 else {}),
        )


def check_tool_answers(gate: ThreadGate, run_input: RunAgentInput) -> None:
    """Refuse input that continues a thread without answering the tool calls its last run left to the client (C23).

    ``UNANSWERED_TOOL_CALLS``: some call of ``gate.pending_tool_calls`` has
    no tool message (keyed by its ``toolCallId``) in the input's messages.
    A failure or a refusal is an answer too: a tool message saying so. A
    client that will not answer starts a new thread instead (C24).
    """
    if not gate.pending_tool_calls:
        return
    answered = {m.tool_call_id for m in run_input.messages or () if getattr(m, "role", None) == "tool"}
    missing = [i for i in gate.pending_tool_calls if i not in answered]
    if missing:
        raise ContractViolation(
            "UNANSWERED_TOOL_CALLS",
            f"The last run of thread {gate.thread_id} left tool call(s) {_ids(missing)} for the client to run; "
            "send one tool message per call (toolCallId, and its result, or an error or refusal as its "
            "content) in messages, or start a new thread.",
            tool_call_ids=missing,
        )


def _unrecognised_warning(gate: ThreadGate, ids: tuple[str, ...]) -> str:
    what = (f"no open interrupt of run {gate.open_run_id}" if gate.open_run_id
            else "no interrupt: nothing on this thread is waiting for an answer")
    return (f"Resume entr{'y' if len(ids) == 1 else 'ies'} {_ids(ids)} name{'s' if len(ids) == 1 else ''} "
            f"{what}; {'it was' if len(ids) == 1 else 'they were'} left out and the run went ahead without "
            f"{'it' if len(ids) == 1 else 'them'}.")
