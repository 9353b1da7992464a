"""The AG-UI contract itself, the dialect every other one departs from."""

from __future__ import annotations

AGUI = "agui"
LANGGRAPH_LEGACY = "langgraph-legacy"

#: The CUSTOM event ag-ui-langgraph sends for each interrupt unless it is served
#: with ``emit_interrupt_outcome=True``.
ON_INTERRUPT = "on_interrupt"


def _interrupt_outcome(terminal: dict | None) -> bool:
    outcome = (terminal or {}).get("outcome") if (terminal or {}).get("type") == "RUN_FINISHED" else None
    return isinstance(outcome, dict) and outcome.get("type") == "interrupt"


class Dialect:
    """The AG-UI contract itself: what the agent sends is what Countersign reads."""

    name = AGUI
    label = "AG-UI (interrupt outcome)"
    #: Whether ``resume_input`` changes anything (the hub reads the batch for it only then).
    reshapes_resume = False

    def keeps(self, custom_name: object) -> bool:
        """Whether the streamer keeps a CUSTOM event of this name for ``terminal`` and ``notice``."""
        return custom_name == ON_INTERRUPT

    def terminal(self, terminal: dict, customs: list[dict], run_id: str) -> dict:
        """The run's terminal event as Countersign reads it; ``customs`` are the kept CUSTOM events, in order."""
        return terminal

    def notice(self, terminal: dict | None, customs: list[dict]) -> str:
        """What this run's end says about how the agent is registered, in words ("" when nothing)."""
        if (terminal or {}).get("type") == "RUN_FINISHED" and not _interrupt_outcome(terminal) and any(
                event.get("name") == ON_INTERRUPT for event in customs):
            return ("The agent paused with LangGraph's CUSTOM on_interrupt event and ended the run without an "
                    "interrupt outcome, so nothing reached the inbox. Register it with the dialect "
                    f"'{LANGGRAPH_LEGACY}', or serve it with ag-ui-langgraph's emit_interrupt_outcome=True.")
        return ""

    def resume_input(self, run_input: dict, interrupts: list[dict]) -> dict:
        """The RunAgentInput of a resume (``interrupts``: the batch as raised, in order) as the agent takes it."""
        return run_input

    def outgoing(self, run_input: dict) -> dict:
        """The RunAgentInput as sent to the agent, from the one recorded (``Run.input``, which the hub reads).

        Never with a ``forwardedProps.command.resume``: ag-ui-langgraph (and
        LangGraph's own clients) answer the interrupt the graph still holds
        with it, outside the inbox: after an interrupt expired or was closed
        here, new input carrying one would approve what nobody decided.
        """
        return without_command_resume(run_input)


def without_command_resume(run_input: dict) -> dict:
    """``run_input`` without ``forwardedProps.command.resume`` (the rest of a client's command stays)."""
    forwarded = run_input.get("forwardedProps")
    command = forwarded.get("command") if isinstance(forwarded, dict) else None
    if not isinstance(command, dict) or "resume" not in command:
        return run_input
    return {**run_input, "forwardedProps": {**forwarded, "command": {
        k: v for k, v in command.items() if k != "resume"}}}
