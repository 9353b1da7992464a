"""Checking a countersignature: the request's signature, then each answer's fingerprint.

Countersign signs every request it sends an agent (``Countersign-Signature``,
HMAC-SHA256 over ``"<t>.<raw body>"``) and writes, on every resume entry,
``metadata["countersign"] = {"decisions": [...], "policy": {...},
"fingerprint": "sha256:..."}``. An agent given its signing secret checks
both before its code runs:

- ``check_signature``: the raw body is what Countersign sent, recently
  (``BAD_SIGNATURE``);
- ``attested_approvals``: each entry's fingerprint is the one recomputed from
  this input, so an answer cannot be moved to another thread, run, interrupt
  or tool call, nor its status or payload changed (``BAD_FINGERPRINT``); it
  returns who approved each answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ag_ui.core import RunAgentInput

from ..protocol import signing
from .errors import AgentError

#: Given the input and an interrupt id, the tool call ids its fingerprint may name.
ToolCallIds = Callable[[RunAgentInput, str], Iterable[str | None]]


class BadSignature(AgentError):
    """The request is unsigned, forged or stale (RUN_ERROR ``BAD_SIGNATURE``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="BAD_SIGNATURE")


class BadFingerprint(AgentError):
    """A signed request's resume entry lacks an attestation, or has one that does not match (``BAD_FINGERPRINT``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="BAD_FINGERPRINT")


class BadPasskey(AgentError):
    """An approval that must carry a passkey assertion has none, or one that does not sign it (``BAD_PASSKEY``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="BAD_PASSKEY")


#: The actions that approve: with ``require_passkey``, each must carry a passkey assertion.
APPROVING = ("approve", "edit", "respond")


@dataclass(frozen=True)
class Approval:
    """One person's decision on an answer, as Countersign attested it.

    ``at`` is the ISO 8601 time as sent; ``action`` is Countersign's
    (``approve``, ``edit``, ``respond``, ``reject``, ``cancel``, ...).
    """

    username: str
    user_id: Any
    action: str
    at: str
    comment: str = ""
    #: ``{"id", "by"}`` when a standing grant approved in ``username``'s name, not the person at that moment.
    grant: Any = None
    #: ``{"name", "by"}`` when a policy's "auto-approve when" rule approved, set by ``username``.
    by_policy: Any = None
    #: The WebAuthn assertion over this exact approval, with the public key and relying party that check it
    #: (``check_passkey``), where Countersign's policy asked for the approver's passkey.
    passkey: Any = None


def check_passkey(passkey: Any, fingerprint: str) -> None:
    """Raise ``BadPasskey`` unless ``passkey`` (an attested decision's) is a WebAuthn assertion, by the public key
    it names, whose challenge is this answer's ``fingerprint`` with the policy version (``passkey_challenge``)."""
    problem = signing.passkey_problem(passkey, fingerprint)
    if problem:
        raise BadPasskey(f"The approval's passkey assertion {problem}.")


def check_signature(secret: str, header: str | None, body: bytes, *, now: float | None = None,
                    tolerance: int = signing.DEFAULT_TOLERANCE) -> int:
    """Raise ``BadSignature`` unless ``header`` signs ``body`` with ``secret`` within ``tolerance`` seconds.

    ``body`` must be the raw bytes received, before any parsing: a
    re-serialised body differs by a space and fails. Returns the signature's
    timestamp.
    """
    try:
        return signing.verify(secret, header, body, time.time() if now is None else now, tolerance)
    except signing.SignatureError as problem:
        raise BadSignature(problem.message) from None


def conversation_tool_call_ids(run_input: RunAgentInput, interrupt_id: str) -> list[str | None]:
    """No tool call, or any tool call of the (signed) conversation: the default candidates.

    An agent keeps nothing between runs, so the SDK cannot know which tool
    call an interrupt it raised was about. The conversation Countersign
    signs is the agent's last MESSAGES_SNAPSHOT (plus the user's messages):
    it holds a call the agent proposed only if a snapshot did. An SDK
    agent's does: ``ctx.tool_call`` records the call and the driver sends
    MESSAGES_SNAPSHOT at every interrupt. An agent that streams a call only
    as TOOL_CALL_START/ARGS/END (by hand, or through ``ctx.emit``, which
    records nothing) and interrupts on it sends no snapshot holding it, so
    the default refuses every answer to that interrupt with
    ``BAD_FINGERPRINT``: such an agent must say which call it was
    (``Agent.tool_call_ids_for``, from the interrupt id or the state), which
    also binds the answer tighter.
    """
    ids: list[str | None] = [None]
    for message in run_input.messages or []:
        for call in getattr(message, "tool_calls", None) or []:
            if call.id not in ids:
                ids.append(call.id)
    return ids


def _approvals(interrupt_id: str, decisions: Any) -> tuple[Approval, ...]:
    if not isinstance(decisions, list):
        raise BadFingerprint(f"The attestation of {interrupt_id!r} has no list of decisions.")
    approvals = []
    for decision in decisions:
        if not isinstance(decision, Mapping) or not isinstance(decision.get("username"), str) \
                or not isinstance(decision.get("action"), str):
            raise BadFingerprint(f"A decision in the attestation of {interrupt_id!r} has no username or action.")
        approvals.append(Approval(
            username=decision["username"],
            user_id=decision.get("userId"),
            action=decision["action"],
            at=str(decision.get("at") or ""),
            comment=str(decision.get("comment") or ""),
            grant=decision.get("grant"), by_policy=decision.get("byPolicy"), passkey=decision.get("passkey"),
        ))
    return tuple(approvals)


def attested_approvals(run_input: RunAgentInput,
                       tool_call_ids: ToolCallIds = conversation_tool_call_ids, *,
                       require_passkey: bool = False) -> dict[str, tuple[Approval, ...]]:
    """Who decided each answer of a signed resume, by interrupt id; ``BadFingerprint`` if any entry fails.

    Call it only on a request whose signature checked: the decisions are
    trusted because the signature covers them, the fingerprint ties each
    answer to this thread, the interrupted run (``parentRunId``), its
    interrupt and tool call. An entry without ``metadata.countersign`` is
    refused, not skipped: Countersign writes one on every entry it sends.
    ``require_passkey``: every approval of a resolved answer must also carry a passkey assertion over it
    (``check_passkey``; ``BadPasskey`` otherwise): a rejection (``approved: false``) needs none.
    """
    approvals: dict[str, tuple[Approval, ...]] = {}
    for entry in run_input.resume or []:
        attestation = (entry.metadata or {}).get(signing.METADATA_KEY)
        if not isinstance(attestation, Mapping) or not isinstance(attestation.get("fingerprint"), str):
            raise BadFingerprint(
                f"The answer to {entry.interrupt_id!r} carries no metadata.{signing.METADATA_KEY}.fingerprint."
            )
        try:
            computed = {
                signing.fingerprint(thread_id=run_input.thread_id, run_id=run_input.parent_run_id,
                                    interrupt_id=entry.interrupt_id, tool_call_id=tool_call_id,
                                    status=entry.status, payload=entry.payload)
                for tool_call_id in tool_call_ids(run_input, entry.interrupt_id)
            }
        except signing.Unsignable as problem:
            raise BadFingerprint(f"The answer to {entry.interrupt_id!r}: {problem.message}") from None
        if attestation["fingerprint"] not in computed:
            raise BadFingerprint(
                f"The fingerprint of the answer to {entry.interrupt_id!r} does not match this thread, "
                "run, interrupt, status and payload."
            )
        approvals[entry.interrupt_id] = _approvals(entry.interrupt_id, attestation.get("decisions", []))
        if require_passkey and entry.status == "resolved":
            # A resolved answer that approves nothing (a rejection's {approved: false}) needs no passkey.
            for approval in (a for a in approvals[entry.interrupt_id] if a.action in APPROVING):
                check_passkey(approval.passkey, attestation["fingerprint"])
    return approvals
