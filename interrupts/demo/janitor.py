"""A free-standing yes/no question: reason ``confirmation``."""

from ..sdk import Agent, InterruptDefinition, RunOutcome
from . import asked

CONFIRM_CLEAR = InterruptDefinition(
    id="confirm-clear",
    reason="confirmation",
    response_schema={
        "type": "object",
        "properties": {"confirm": {"type": "boolean"}},
        "required": ["confirm"],
    },
)

DEFAULT_BOARD = ["Write release notes", "Rotate staging keys", "Archive Q3 tickets"]


class Janitor(Agent):
    name = "janitor"
    description = "Asks before clearing the task board, or the paths your message names."

    async def run(self, ctx):
        state = ctx.state
        tasks = state.get("tasks", DEFAULT_BOARD) if isinstance(state, dict) else DEFAULT_BOARD
        answer = ctx.resume_for(CONFIRM_CLEAR)
        if answer is None:
            # Paths the message names are what it asks to clear; the board otherwise.
            tasks = asked.paths(asked.last_user_text(ctx)) or tasks
            # The board travels in state, so the resumed run knows what it was asked about.
            ctx.set_state({**state, "tasks": tasks})
            return RunOutcome.interrupt([CONFIRM_CLEAR.interrupt(
                message=f"Clear the board? {len(tasks)} task(s) will be removed: {', '.join(tasks)}.")])
        if answer.status == "resolved" and answer.payload["confirm"]:
            ctx.set_state({**state, "tasks": []})
            ctx.say(f"Cleared {len(tasks)} task(s).")
        else:
            ctx.say("Kept the board as it was.")
        return RunOutcome.success()
