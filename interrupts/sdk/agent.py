"""What an agent author writes: an ``Agent``, its ``RunOutcome``, its interrupts.

An agent keeps nothing between runs. A paused run is over when its stream
ends; the resumed run starts from nothing and rebuilds its position from the
input's ``messages``, ``state`` and ``resume`` alone. So the SDK hands each run
a fresh ``RunContext`` and asks only for an outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ag_ui.core import Interrupt, ResumeEntry

from ..protocol.capabilities import DEDUPES_RUN_ID
from ..protocol.errors import ContractViolation
from ..protocol.schema.checks import check_schema
from ..protocol.schema.payloads import payload_errors
from .errors import AgentError
from .verify import conversation_tool_call_ids

if TYPE_CHECKING:
    from .context import RunContext


class InvalidOutcome(AgentError):
    """The agent returned an outcome the protocol forbids (RUN_ERROR ``PROTOCOL``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="PROTOCOL")


class InvalidResume(AgentError):
    """A resume answer does not fit what the interrupt asked (RUN_ERROR ``INVALID_RESUME``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="INVALID_RESUME")


class Agent:
    """Base class for an AG-UI agent served by the SDK.

    Subclasses set ``name`` and implement ``run``. ``run`` emits through the
    context (``ctx.say``, ``ctx.tool_call``, …) and returns a ``RunOutcome``;
    raising ``AgentError`` (or anything else) ends the run with RUN_ERROR.
    """

    name: str = "agent"
    description: str = ""
    #: The secret Countersign signs requests to this agent with; None: do not verify.
    signing_secret: str | None = None
    #: How far (seconds) a signature's time may be from this agent's clock.
    signature_tolerance: int = 300
    #: With a secret, whether an unsigned request is refused (True) or answered unverified.
    require_signature: bool = True
    #: With a secret, whether every approval must carry a passkey assertion over that exact approval
    #: (``BAD_PASSKEY`` otherwise): for agents whose policy in Countersign requires one.
    require_passkey: bool = False
    #: Runs whose answers are kept, so a request repeating a runId is answered with the
    #: recorded events instead of running again (``dedupe``); 0: every request runs.
    remember_runs: int = 1000

    def __init__(self, *, signing_secret: str | None = None, signature_tolerance: int = 300,
                 require_signature: bool = True, require_passkey: bool = False) -> None:
        """``signing_secret``: verify every request (``BAD_SIGNATURE``) and every answer's fingerprint;
        ``require_passkey``: and every approval's passkey assertion (``BAD_PASSKEY``)."""
        self.signing_secret = signing_secret
        self.signature_tolerance = signature_tolerance
        self.require_signature = require_signature
        self.require_passkey = require_passkey

    def capabilities(self) -> dict:
        """What this agent declares (AG-UI AgentCapabilities, wire form): register it as the agent's capabilities.

        With ``remember_runs`` it declares ``custom.dedupesRunId``: Countersign
        then re-sends a resume whose answer it lost, trusting the repeat to be answered, not acted on.
        """
        declared: dict = {"humanInTheLoop": {"interrupts": True}}
        if self.remember_runs > 0:
            declared["custom"] = {DEDUPES_RUN_ID: True}
        return declared

    def tool_call_ids_for(self, run_input, interrupt_id: str):
        """The tool call ids the interrupt ``interrupt_id`` may have been about (``None``: none).

        Used to recompute an answer's fingerprint. The default accepts no
        tool call or any tool call of the signed conversation, since an
        agent keeps nothing between runs; override it when the interrupt id
        or the state says exactly which call an interrupt was about.
        """
        return conversation_tool_call_ids(run_input, interrupt_id)

    async def run(self, ctx: RunContext) -> RunOutcome:  # pragma: no cover - abstract
        """Do one run's work through ``ctx`` and say how it ends."""
        raise NotImplementedError(f"{type(self).__name__}.run is not implemented")


@dataclass(frozen=True)
class RunOutcome:
    """How a run ends: ``success`` or ``interrupt`` with the questions it leaves open."""

    type: str
    interrupts: tuple[Interrupt, ...] = ()
    result: Any = None

    @classmethod
    def success(cls, result: Any = None) -> RunOutcome:
        """The run completed; ``result`` travels on RUN_FINISHED's root."""
        return cls("success", result=result)

    @classmethod
    def interrupt(cls, interrupts) -> RunOutcome:
        """The run pauses until every one of ``interrupts`` is answered in one resume."""
        return cls("interrupt", interrupts=tuple(interrupts))

    def validate(self) -> None:
        """Raise ``InvalidOutcome`` for an outcome the protocol forbids, such as an empty interrupt list."""
        if self.type == "success":
            if self.interrupts:
                raise InvalidOutcome("A success outcome cannot carry interrupts.")
            return
        if self.type != "interrupt":
            raise InvalidOutcome(f"Unknown outcome type {self.type!r}: use success or interrupt.")
        if not self.interrupts:
            raise InvalidOutcome("An interrupt outcome needs at least one interrupt.")
        seen: set[str] = set()
        for item in self.interrupts:
            if not isinstance(item, Interrupt):
                raise InvalidOutcome(f"{item!r} is not an ag_ui.core.Interrupt.")
            if not item.id or not item.reason:
                raise InvalidOutcome("Every interrupt needs a non-empty id and reason.")
            if item.id in seen:
                raise InvalidOutcome(f"Interrupt id {item.id!r} appears twice in one outcome.")
            seen.add(item.id)
            if item.reason == "tool_call" and not item.tool_call_id:
                raise InvalidOutcome(
                    f"Interrupt {item.id!r} has reason 'tool_call' but no toolCallId."
                )
            if item.response_schema is not None:
                try:
                    check_schema(item.response_schema)
                except ContractViolation as problem:
                    raise InvalidOutcome(f"Interrupt {item.id!r}: {problem.message}") from None


def interrupt(id: str, reason: str, **fields: Any) -> Interrupt:
    """An ``ag_ui.core.Interrupt``: ``id`` and ``reason`` required, the rest optional.

    Accepts the snake_case field names (``message``, ``tool_call_id``,
    ``response_schema``, ``expires_at``, ``metadata``).
    """
    return Interrupt(id=id, reason=reason, **fields)


@dataclass(frozen=True)
class InterruptDefinition:
    """One question shared by the code that asks it and the code that reads its answer.

    TanStack AI's ``defineInterrupt``.

    ``ctx.resume_for(definition)`` validates a resolved answer against
    ``response_schema``, so the agent never acts on an answer of the wrong shape.
    """

    id: str
    response_schema: dict
    reason: str = "input_required"
    payload_schema: dict | None = None
    message: str | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("An InterruptDefinition needs an id.")
        if not isinstance(self.response_schema, dict):
            raise ValueError(f"{self.id}: response_schema is required and must be a JSON Schema object.")
        check_schema(self.response_schema)
        if self.payload_schema is not None:
            check_schema(self.payload_schema)

    def interrupt(self, payload: Any = None, *, message: str | None = None, **fields: Any) -> Interrupt:
        """The interrupt asking this question, with ``payload`` for the client to show."""
        metadata = dict(fields.pop("metadata", None) or {})
        if payload is not None:
            if self.payload_schema is not None:
                errors = payload_errors(self.payload_schema, payload)
                if errors:
                    raise ValueError(
                        f"{self.id}: the display payload does not fit payload_schema: "
                        f"{errors[0]['path'] or '/'}: {errors[0]['message']}"
                    )
            metadata["payload"] = payload
        return Interrupt(
            id=self.id,
            reason=self.reason,
            message=message or self.message,
            response_schema=self.response_schema,
            metadata=metadata or None,
            **{**self.extra, **fields},
        )

    def check_answer(self, entry: ResumeEntry) -> ResumeEntry:
        """Return ``entry`` if its payload fits ``response_schema``; else raise ``InvalidResume``."""
        if entry.status != "resolved":
            return entry
        if entry.payload is None:
            raise InvalidResume(f"The answer to {self.id!r} is resolved but carries no payload.")
        errors = payload_errors(self.response_schema, entry.payload)
        if errors:
            where = errors[0]["path"] or "the payload"
            raise InvalidResume(
                f"The answer to {self.id!r} does not fit its responseSchema: {where}: {errors[0]['message']}"
            )
        return entry
