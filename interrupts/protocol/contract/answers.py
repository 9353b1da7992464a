"""Rules 6-8 of the interrupt contract, and what makes an interrupt doubtful: is this answer valid?

``check_entry`` holds one resume entry to the interrupt it answers (its status,
its payload against the interrupt's ``responseSchema``, its expiry);
``interrupt_problems`` flags what an agent's interrupt gets wrong without
refusing it (the pause already happened; hiding it would help nobody).
Pure: the caller passes ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from ag_ui.core import Interrupt, ResumeEntry

from ..errors import ContractViolation
from ..schema.checks import check_schema, check_usable_schema
from ..schema.edits import apply_edits
from ..schema.payloads import validate_payload
from ..schema.scan import schema_problems

#: Metadata key the spec reserves for AG-UI's own use.
RESERVED_METADATA_KEY = "ag-ui"
#: Reason prefix the spec reserves for future core reasons.
RESERVED_REASON_PREFIX = "core:"

_STATUSES = ("resolved", "cancelled")


# --------------------------------------------------------------------------- #
# Small helpers
# --------------------------------------------------------------------------- #


def _ids(ids: Iterable[str]) -> str:
    """Ids as a readable comma-separated list, in the order given."""
    return ", ".join(ids)


def _require_aware(now: Any) -> None:
    """Refuse a ``now`` that cannot be compared with an expiry (a programmer error)."""
    if not isinstance(now, datetime):
        raise TypeError(f"now must be a datetime, not {type(now).__name__}")
    if now.tzinfo is None or now.utcoffset() is None:
        # A naive "now" is ambiguous (server local time? UTC?) and comparing it
        # with an aware expiry would either raise or silently be off by hours.
        raise ValueError("now must be a timezone-aware datetime (for example datetime.now(timezone.utc))")


# --------------------------------------------------------------------------- #
# Expiry (rule 7)
# --------------------------------------------------------------------------- #


def parse_expiry(expires_at: str | None) -> datetime | None:
    """``expiresAt`` as an aware UTC datetime, or ``None`` when there is no expiry.

    Accepts ISO-8601 as ``datetime.fromisoformat`` reads it: ``Z`` or a numeric
    offset (converted to UTC), basic or extended format, a space instead of
    ``T``, lowercase ``t``/``z`` (RFC 3339 allows them), surrounding whitespace.
    A timestamp without an offset is read as UTC, the only zone a wire value can
    sensibly mean; a bare date is midnight UTC that day, the earliest reading, so
    ambiguity can only make an interrupt expire sooner, never later.

    Raises ``ContractViolation("INVALID_EXPIRY")`` for anything else, including
    an empty string. Unparsable must never mean "never expires": the AG-UI model
    itself warns that an unreadable value leaves the interrupt looking
    permanently unexpired.
    """
    if expires_at is None:
        return None
    if not isinstance(expires_at, str):
        raise ContractViolation(
            "INVALID_EXPIRY",
            f"expiresAt must be an ISO-8601 string, not {type(expires_at).__name__}.",
            expires_at=repr(expires_at),
        )
    try:
        parsed = datetime.fromisoformat(expires_at.strip().upper())
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        # astimezone can overflow at the edges of the calendar
        # ("0001-01-01T00:00:00+01:00"): still unreadable, not "never".
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        raise ContractViolation(
            "INVALID_EXPIRY",
            f"expiresAt {expires_at!r} is not an ISO-8601 timestamp such as 2026-04-20T17:00:00Z.",
            expires_at=expires_at,
        ) from None


def _expiry_of(interrupt: Interrupt) -> datetime | None:
    """``parse_expiry`` for one interrupt, with the interrupt named in any refusal."""
    try:
        return parse_expiry(interrupt.expires_at)
    except ContractViolation as exc:
        raise ContractViolation(
            "INVALID_EXPIRY",
            f"Interrupt {interrupt.id} has an unreadable expiresAt ({exc.message}) "
            "so it cannot be answered safely; the agent must re-issue it with a valid timestamp.",
            interrupt_id=interrupt.id,
            expires_at=exc.details.get("expires_at"),
        ) from None


# --------------------------------------------------------------------------- #
# Interrupts as the agent sent them
# --------------------------------------------------------------------------- #


def interrupt_problems(interrupt: Interrupt) -> list[ContractViolation]:
    """What is wrong with *interrupt* as the agent sent it, to flag when recording.

    These are flags, not refusals: the run already ended with this interrupt, so
    the hub records it and shows the problems to the reviewer. Codes:

    * ``EMPTY_INTERRUPT_ID`` - the id (the correlation key) is empty;
    * ``MISSING_TOOL_CALL_ID`` - reason ``tool_call`` without ``toolCallId``;
    * ``RESERVED_REASON`` - reason uses the reserved ``core:`` prefix;
    * ``INVALID_EXPIRY`` - ``expiresAt`` is not ISO-8601 (the interrupt is
      judged expired: ``check_entry`` refuses resolving it, accepts cancelling it);
    * ``INVALID_SCHEMA`` - ``responseSchema`` is not a usable JSON Schema
      (it can then only be cancelled);
    * ``SCHEMA_TOO_LARGE`` / ``REMOTE_REF`` / ``UNSAFE_PATTERN`` -
      ``responseSchema`` is too big or deep, references something outside
      itself (never fetched), or has a pattern RE2 cannot run
      (``schema.schema_problems``); it can then only be cancelled too. An
      oversized schema is not read further, so it gets no INVALID_SCHEMA.
    * ``INVALID_METADATA`` - metadata present but not an object;
    * ``RESERVED_METADATA_KEY`` - metadata uses the ``ag-ui`` key (see the
      module docstring for why this is a flag here and a refusal on answers).

    Every problem carries ``interrupt_id`` in its details. Missing
    ``responseSchema`` on ``input_required`` is a "should" in the spec and is
    not flagged.
    """
    problems: list[ContractViolation] = []
    iid = interrupt.id
    if not isinstance(iid, str) or not iid.strip():
        problems.append(
            ContractViolation(
                "EMPTY_INTERRUPT_ID",
                "An interrupt has an empty id, so no resume entry can reference it; the agent must give it an id.",
                interrupt_id=iid,
            )
        )
    if interrupt.reason == "tool_call" and not interrupt.tool_call_id:
        problems.append(
            ContractViolation(
                "MISSING_TOOL_CALL_ID",
                f"Interrupt {iid} has reason tool_call but no toolCallId, so it cannot be tied "
                "to the tool call it is about; the agent must set toolCallId.",
                interrupt_id=iid,
            )
        )
    if isinstance(interrupt.reason, str) and interrupt.reason.startswith(RESERVED_REASON_PREFIX):
        problems.append(
            ContractViolation(
                "RESERVED_REASON",
                f"Interrupt {iid} uses reason {interrupt.reason!r}; the core: prefix is reserved for "
                "future spec additions, custom reasons should be namespaced as <framework>:<name>.",
                interrupt_id=iid,
                reason=interrupt.reason,
            )
        )
    try:
        _expiry_of(interrupt)
    except ContractViolation as exc:
        problems.append(exc)
    if interrupt.response_schema is not None:
        # The static scan comes first, as in check_usable_schema: it checks
        # size before anything reads the schema, and names the reason a
        # pattern or reference is refused; the metaschema check, which would
        # only say "is not a 'regex'" of the same pattern, runs when it found none.
        unsafe = schema_problems(interrupt.response_schema, interrupt_id=iid)
        if not unsafe:
            try:
                check_schema(interrupt.response_schema, interrupt_id=iid)
            except ContractViolation as exc:
                problems.append(exc)
        problems.extend(unsafe)
    problems.extend(_metadata_problems(interrupt.metadata, f"Interrupt {iid}", iid))
    return problems


def outcome_problems(interrupts: Iterable[Interrupt]) -> list[ContractViolation]:
    """``interrupt_problems`` for each interrupt of one interrupt outcome, plus
    ``DUPLICATE_INTERRUPT_ID`` when two interrupts share an id (a resume entry
    could not say which one it answers).
    """
    problems: list[ContractViolation] = []
    seen: set[str] = set()
    reported: set[str] = set()
    for interrupt in interrupts:
        problems.extend(interrupt_problems(interrupt))
        if interrupt.id in seen and interrupt.id not in reported:
            reported.add(interrupt.id)
            problems.append(_duplicate(interrupt.id))
        seen.add(interrupt.id)
    return problems


def duplicate_ids(interrupts: Iterable[Interrupt]) -> list[ContractViolation]:
    """``DUPLICATE_INTERRUPT_ID`` for each id two interrupts of one outcome share, and nothing else.

    The cheap part of ``outcome_problems``: it reads ids only, never a schema,
    so it may run where the agent must not be able to make work long.
    """
    seen: set[str] = set()
    reported: dict[str, ContractViolation] = {}
    for interrupt in interrupts:
        if interrupt.id in seen and interrupt.id not in reported:
            reported[interrupt.id] = _duplicate(interrupt.id)
        seen.add(interrupt.id)
    return list(reported.values())


def _duplicate(interrupt_id: str) -> ContractViolation:
    return ContractViolation(
        "DUPLICATE_INTERRUPT_ID",
        f"Two interrupts of the same run share the id {interrupt_id}; a resume entry cannot say which one it answers.",
        interrupt_id=interrupt_id,
    )


def _metadata_problems(metadata: Any, subject: str, interrupt_id: str) -> list[ContractViolation]:
    """INVALID_METADATA / RESERVED_METADATA_KEY for an interrupt's or an entry's metadata."""
    if metadata is None:
        return []
    if not isinstance(metadata, dict):
        return [
            ContractViolation(
                "INVALID_METADATA",
                f"{subject} has metadata of type {type(metadata).__name__}; metadata must be "
                "an object (or left out).",
                interrupt_id=interrupt_id,
            )
        ]
    if RESERVED_METADATA_KEY in metadata:
        return [
            ContractViolation(
                "RESERVED_METADATA_KEY",
                f"{subject} uses the metadata key {RESERVED_METADATA_KEY!r}, which is reserved for "
                "AG-UI itself; move that data under another key.",
                interrupt_id=interrupt_id,
            )
        ]
    return []


# --------------------------------------------------------------------------- #
# One resume entry against its interrupt (rules 6, 7, 8)
# --------------------------------------------------------------------------- #


def check_entry(interrupt: Interrupt, entry: ResumeEntry, now: datetime) -> None:
    """Refuse *entry* unless it is an acceptable answer to *interrupt* at *now*.

    Checks, in order (the first failure is raised):

    * ``INVALID_STATUS`` - status is neither ``resolved`` nor ``cancelled``;
    * ``INVALID_EXPIRY`` - a resolved entry for an interrupt whose
      ``expiresAt`` is unreadable: Countersign judges it expired (C18);
    * ``EXPIRED`` - a resolved entry at ``now >= expiresAt`` (C19). A
      cancelled entry is accepted: 1.0 (C20) requires an expired interrupt to
      be covered, abandoned with ``cancelled``;
    * ``INVALID_METADATA`` / ``RESERVED_METADATA_KEY`` - entry metadata not an
      object, or using the reserved ``ag-ui`` key;
    * ``PAYLOAD_ON_CANCEL`` - a cancelled entry carries a payload;
    * for a resolved entry on an interrupt with a ``responseSchema``:
      ``INVALID_SCHEMA`` (the schema is broken: reported, not crashed on;
      cancelling stays possible), ``SCHEMA_TOO_LARGE`` / ``REMOTE_REF`` /
      ``UNSAFE_PATTERN`` (the schema is unsafe to validate with, see
      ``interrupt_problems``; cancelling stays possible), ``MISSING_PAYLOAD``
      (rule 8), ``INVALID_PAYLOAD`` (rule 6, with ``errors=[{path, message}]``)
      and ``SCHEMA_TOO_COSTLY`` (checking this answer would take more than the
      validation budget);
    * ``INVALID_PAYLOAD`` - on a tool-bound interrupt, ``editedArgs`` present but
      not an object (it could not replace the tool's arguments).

    A resolved entry on an interrupt without a schema may carry any payload or
    none. Raises ``TypeError``/``ValueError`` when *now* is not an aware
    datetime, and ``ValueError`` when the entry is not for this interrupt: both
    are programming errors, not contract violations.
    """
    _require_aware(now)
    if entry.interrupt_id != interrupt.id:
        raise ValueError(f"entry answers {entry.interrupt_id!r}, not interrupt {interrupt.id!r}")
    iid = interrupt.id

    if entry.status not in _STATUSES:
        raise ContractViolation(
            "INVALID_STATUS",
            f"The answer to interrupt {iid} has status {entry.status!r}; it must be resolved or cancelled.",
            interrupt_id=iid,
        )

    # Only an answer is stale: abandoning is how an expired interrupt is covered (C19, C20).
    expires = _expiry_of(interrupt) if entry.status == "resolved" else None
    if expires is not None and now >= expires:
        raise ContractViolation(
            "EXPIRED",
            f"Interrupt {iid} expired at {expires.isoformat().replace('+00:00', 'Z')} and can no longer "
            "be answered; the agent must be asked again.",
            interrupt_id=iid,
            expires_at=interrupt.expires_at,
        )

    for problem in _metadata_problems(entry.metadata, f"The answer to interrupt {iid}", iid):
        raise problem

    if entry.status == "cancelled":
        if entry.payload is not None:
            raise ContractViolation(
                "PAYLOAD_ON_CANCEL",
                f"The answer to interrupt {iid} is cancelled but carries a payload; a cancellation "
                "has no answer. Leave the payload out, or resolve it (denials go in the payload).",
                interrupt_id=iid,
            )
        return

    schema = interrupt.response_schema
    if schema is not None:
        # Before anything reads the payload: an unsafe schema refuses every
        # answer with the code interrupt_problems flagged it with.
        check_usable_schema(schema, interrupt_id=iid)
        if entry.payload is None:
            raise ContractViolation(
                "MISSING_PAYLOAD",
                f"Interrupt {iid} asks for an answer matching its responseSchema but the resolved entry "
                "has no payload; send the payload, or cancel the interrupt.",
                interrupt_id=iid,
            )
        validate_payload(schema, entry.payload, interrupt_id=iid)

    if interrupt.tool_call_id:
        # The hub will execute editedArgs as the tool's full arguments, so a
        # non-object must be refused now, even when the schema left it untyped.
        apply_edits({}, entry.payload, interrupt_id=iid)
