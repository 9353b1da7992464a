"""``RunContext``: everything one run can read (its input) and say (its events)."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import jsonpatch
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    FunctionCall,
    MessagesSnapshotEvent,
    ResumeEntry,
    RunAgentInput,
    StateDeltaEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
)

from .agent import InterruptDefinition
from .verify import Approval


def new_id(prefix: str) -> str:
    """A fresh id for a message or a tool call; opaque to everyone but the agent."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


class RunContext:
    """One run's view of its input, and the only way it emits events.

    Every emitter keeps ``messages`` and ``state`` in step with what it sends,
    so the snapshots the driver emits at an interrupt boundary hold exactly
    what a resumed run will need to rebuild its position.
    """

    def __init__(self, run_input: RunAgentInput, emit: Callable[[BaseEvent], None],
                 approvals: Mapping[str, tuple[Approval, ...]] | None = None) -> None:
        self.input = run_input
        # Only ever filled from a request whose signature and fingerprints checked.
        self._approvals = dict(approvals or {})
        self._emit = emit
        self._messages = list(run_input.messages or [])
        self._state = copy.deepcopy(run_input.state) if run_input.state is not None else {}
        self._state_sent = False
        self._resume = {entry.interrupt_id: entry for entry in (run_input.resume or [])}
        # Tool calls this run started itself; a result for any other call needs
        # the call in a MESSAGES_SNAPSHOT first (see tool_result).
        self._own_tool_calls: set[str] = set()
        self._history_snapshot_sent = False

    # --- the input ---------------------------------------------------------

    @property
    def thread_id(self) -> str:
        """The conversation this run belongs to."""
        return self.input.thread_id

    @property
    def run_id(self) -> str:
        """This run's id (a resume has a new one; ``input.parent_run_id`` names the paused run)."""
        return self.input.run_id

    @property
    def messages(self) -> list:
        """The conversation so far: the input's messages plus what this run said."""
        return list(self._messages)

    @property
    def state(self) -> Any:
        """A copy of the agent state; change it with ``set_state`` or ``patch_state``."""
        return copy.deepcopy(self._state)

    def is_resume(self) -> bool:
        """Whether this request answers a paused run (it carries a ``resume``)."""
        return bool(self._resume)

    def resume(self) -> list[ResumeEntry]:
        """Every answer this request carries, in the order sent."""
        return list(self._resume.values())

    def resume_for(self, key: str | InterruptDefinition) -> ResumeEntry | None:
        """The answer to one interrupt, or ``None`` when this request has none.

        Given an ``InterruptDefinition``, a resolved answer is checked against
        its response schema first: a payload of the wrong shape raises
        ``InvalidResume`` and the run ends with RUN_ERROR ``INVALID_RESUME``.
        """
        if isinstance(key, InterruptDefinition):
            entry = self._resume.get(key.id)
            return key.check_answer(entry) if entry is not None else None
        return self._resume.get(key)

    def approvals_for(self, key: str | InterruptDefinition) -> list[Approval]:
        """Who decided the answer to one interrupt, as Countersign signed it; empty when unverified.

        Filled only when the request's ``Countersign-Signature`` and the
        answer's fingerprint checked (an ``Agent`` given a ``signing_secret``):
        an unsigned request, or an agent that does not verify, gets ``[]``,
        so "no approvers" never reads as "approved by nobody in particular".
        """
        return list(self._approvals.get(key.id if isinstance(key, InterruptDefinition) else key, ()))

    def find_tool_call(self, tool_call_id: str) -> ToolCall | None:
        """The tool call with this id in the conversation, from this run or an earlier one."""
        for message in self._messages:
            for call in getattr(message, "tool_calls", None) or []:
                if call.id == tool_call_id:
                    return call
        return None

    def tool_call_args(self, tool_call_id: str) -> dict | None:
        """The parsed arguments of an earlier tool call, or ``None`` if it is unknown."""
        call = self.find_tool_call(tool_call_id)
        if call is None:
            return None
        try:
            return json.loads(call.function.arguments or "{}")
        except ValueError:
            return None

    # --- emitting ------------------------------------------------------------

    def emit(self, event: BaseEvent) -> None:
        """Send an event as it is; prefer the helpers, which keep snapshots in step."""
        self._emit(event)

    def say(self, text: str) -> str:
        """Say ``text`` as an assistant message (TEXT_MESSAGE_START/CONTENT/END); returns its id."""
        message_id = new_id("msg")
        self._emit(TextMessageStartEvent(message_id=message_id, role="assistant"))
        if text:
            # CONTENT requires a non-empty delta; an empty message is START+END.
            self._emit(TextMessageContentEvent(message_id=message_id, delta=text))
        self._emit(TextMessageEndEvent(message_id=message_id))
        self._messages.append(AssistantMessage(id=message_id, role="assistant", content=text))
        return message_id

    def tool_call(self, name: str, args: dict) -> str:
        """Propose a tool call (TOOL_CALL_START/ARGS/END); returns its id."""
        tool_call_id = new_id("tc")
        message_id = new_id("msg")
        arguments = json.dumps(args, ensure_ascii=False)
        # No parentMessageId: the assistant message holding the call exists only
        # in the MESSAGES_SNAPSHOT, and a parent no reader has seen is noise.
        self._emit(ToolCallStartEvent(tool_call_id=tool_call_id, tool_call_name=name))
        self._emit(ToolCallArgsEvent(tool_call_id=tool_call_id, delta=arguments))
        self._emit(ToolCallEndEvent(tool_call_id=tool_call_id))
        self._own_tool_calls.add(tool_call_id)
        self._messages.append(
            AssistantMessage(
                id=message_id,
                role="assistant",
                tool_calls=[
                    ToolCall(
                        id=tool_call_id,
                        type="function",
                        function=FunctionCall(name=name, arguments=arguments),
                    )
                ],
            )
        )
        return tool_call_id

    def tool_result(self, tool_call_id: str, content: Any) -> str:
        """Report what a tool call did (TOOL_CALL_RESULT); returns the result message's id.

        A call from an earlier run is not started again (the spec forbids
        re-emitting TOOL_CALL_START/ARGS/END on resume): this run first emits a
        MESSAGES_SNAPSHOT holding that call, so stream readers know it.
        """
        if tool_call_id not in self._own_tool_calls:
            if self.find_tool_call(tool_call_id) is None:
                raise ValueError(
                    f"Tool call {tool_call_id!r} is neither this run's nor in the input's messages."
                )
            if not self._history_snapshot_sent:
                self.snapshot_messages()
                self._history_snapshot_sent = True
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        message_id = new_id("msg")
        self._emit(
            ToolCallResultEvent(
                message_id=message_id, tool_call_id=tool_call_id, content=text, role="tool"
            )
        )
        self._messages.append(
            ToolMessage(id=message_id, role="tool", tool_call_id=tool_call_id, content=text)
        )
        return message_id

    def set_state(self, state: Any) -> None:
        """Replace the state: STATE_SNAPSHOT the first time, STATE_DELTA (JSON Patch) after."""
        new_state = copy.deepcopy(state)
        if self._state_sent:
            operations = jsonpatch.make_patch(self._state, new_state).patch
            if operations:
                self._emit(StateDeltaEvent(delta=operations))
        else:
            self._emit(StateSnapshotEvent(snapshot=new_state))
            self._state_sent = True
        self._state = new_state

    def patch_state(self, operations: list[dict]) -> None:
        """Apply RFC 6902 ``operations`` to the state and emit them as STATE_DELTA."""
        self._state = jsonpatch.apply_patch(self._state, operations)
        if self._state_sent:
            self._emit(StateDeltaEvent(delta=operations))
        else:
            self._emit(StateSnapshotEvent(snapshot=copy.deepcopy(self._state)))
            self._state_sent = True

    def snapshot_state(self) -> None:
        """Emit the whole state as STATE_SNAPSHOT."""
        self._emit(StateSnapshotEvent(snapshot=copy.deepcopy(self._state)))
        self._state_sent = True

    def snapshot_messages(self) -> None:
        """Emit the whole conversation as MESSAGES_SNAPSHOT."""
        self._emit(MessagesSnapshotEvent(messages=list(self._messages)))
