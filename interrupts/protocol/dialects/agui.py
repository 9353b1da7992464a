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

    def keeps(self, event: dict) -> bool:
        """Whether an event of the run is one ``terminal`` and ``notice`` read (a CUSTOM ``on_interrupt``)."""
        return event.get("type") == "CUSTOM" and event.get("name") == ON_INTERRUPT

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

        Never with a client's keys that ``steering`` names: refused where
        input comes in, and left out here too, whatever a stored input holds.
        """
        return without_steering(run_input)


def _spelled(key: object) -> str:
    # ag-ui-langgraph reads forwardedProps' keys after camel_to_snake: every
    # spelling of a name (nodeName, node_name, NodeName) is the same key to it.
    return key.replace("_", "").lower() if isinstance(key, str) else ""


def steering(forwarded_props: object) -> list[str]:
    """The keys of a client's ``forwardedProps`` that would steer a LangGraph graph past its interrupts.

    ag-ui-langgraph (any dialect) reads ``node_name`` as "this node already
    ran, with the input's state" (``aupdate_state(as_node=...)``), so a
    client naming the node that asks for approval skips the question; and
    ``command.resume`` as an answer to the interrupt the graph still holds
    (say one that expired here). Either would act on what nobody decided.
    """
    found = []
    if not isinstance(forwarded_props, dict):
        return found
    for key, value in forwarded_props.items():
        name = _spelled(key)
        if name == "nodename":
            found.append(key)
        elif name == "command" and isinstance(value, dict) and any(_spelled(k) == "resume" for k in value):
            found.append(f"{key}.resume")
    return found


def without_steering(run_input: dict) -> dict:
    """``run_input`` without the ``forwardedProps`` keys ``steering`` names (the rest of them stays)."""
    forwarded = run_input.get("forwardedProps")
    if not steering(forwarded):
        return run_input
    kept = {}
    for key, value in forwarded.items():
        name = _spelled(key)
        if name == "nodename":
            continue
        if name == "command" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if _spelled(k) != "resume"}
        kept[key] = value
    return {**run_input, "forwardedProps": kept}
