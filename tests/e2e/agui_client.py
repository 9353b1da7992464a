"""An AG-UI client for the gateway tests that keeps its conversation the way @ag-ui/client 1.0 does.

It folds the events it receives into its own ``messages`` and ``state`` (the
reducer ``defaultApplyEvents``, as summarised in the spec-1.0 checklist's "How
@ag-ui/client builds messages and state from events"; the events the tested
frameworks send, STATE_DELTA and activity aside), and sends its whole
history with the next run, as ``prepareRunAgentInput`` does. It is written
apart from Countersign's own fold on purpose: it stands for the client.
"""

import copy
import uuid

from ..agui import Streamed, post_run


class AguiClient:
    def __init__(self, url: str, headers: dict, thread: str):
        self.url, self.headers, self.thread = url, headers, thread
        self.messages: list[dict] = []
        self.state: dict = {}
        self.pending: list[dict] = []  # the last run's open interrupts

    def say(self, text: str) -> None:
        self.messages.append({"id": f"user-{uuid.uuid4().hex[:12]}", "role": "user", "content": text})

    async def run(self, resume: list[dict] | None = None) -> Streamed:
        body = {"threadId": self.thread, "runId": f"run-{uuid.uuid4().hex[:12]}",
                "messages": [m for m in copy.deepcopy(self.messages) if m["role"] != "activity"],
                "state": copy.deepcopy(self.state), "tools": [], "context": [], "forwardedProps": {}}
        if resume is not None:
            body["resume"] = resume
        streamed = await post_run(self.url, body, self.headers)
        for event in streamed.events:
            self.apply(event)
        return streamed

    def _tool_call(self, call_id: str):
        for message in self.messages:
            for call in message.get("toolCalls") or []:
                if call["id"] == call_id:
                    return message, call
        return None, None

    def apply(self, event: dict) -> None:  # noqa: C901 (one branch per event type, as the reducer)
        kind, by_id = event["type"], {m["id"]: m for m in self.messages}
        if kind == "RUN_STARTED":
            for message in (event.get("input") or {}).get("messages") or []:
                if message["id"] not in by_id:
                    self.messages.append(message)
        elif kind in ("TEXT_MESSAGE_START", "REASONING_MESSAGE_START"):
            if event["messageId"] not in by_id:
                role = event.get("role", "assistant") if kind == "TEXT_MESSAGE_START" else "reasoning"
                self.messages.append({"id": event["messageId"], "role": role, "content": ""})
        elif kind in ("TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT"):
            if (message := by_id.get(event["messageId"])) is not None:
                message["content"] = (message.get("content") or "") + event["delta"]
        elif kind == "TOOL_CALL_START":
            if self._tool_call(event["toolCallId"])[1] is not None:
                return
            parent = by_id.get(event.get("parentMessageId"))
            if parent is None or parent["role"] != "assistant":
                parent = {"id": event.get("parentMessageId") if parent is None and event.get("parentMessageId")
                          else event["toolCallId"], "role": "assistant"}
                self.messages.append(parent)
            parent.setdefault("toolCalls", []).append(
                {"id": event["toolCallId"], "type": "function",
                 "function": {"name": event["toolCallName"], "arguments": ""}})
        elif kind == "TOOL_CALL_ARGS":
            _owner, call = self._tool_call(event["toolCallId"])
            if call is not None:
                call["function"]["arguments"] += event["delta"]
        elif kind == "TOOL_CALL_RESULT":
            result = {"id": event["messageId"], "role": event.get("role") or "tool",
                      "toolCallId": event["toolCallId"], "content": event["content"]}
            owner, _call = self._tool_call(event["toolCallId"])
            if owner is None:
                self.messages.append(result)
                return
            at = self.messages.index(owner) + 1
            while at < len(self.messages) and self.messages[at]["role"] == "tool":
                at += 1
            self.messages.insert(at, result)
        elif kind == "MESSAGES_SNAPSHOT":
            snapshot = event["messages"]
            roles = {m["role"] for m in snapshot}
            fresh = {m["id"]: m for m in snapshot}
            kept = [fresh[m["id"]] if m["id"] in fresh else m for m in self.messages
                    if m["id"] in fresh or (m["role"] in ("activity", "reasoning") and m["role"] not in roles)]
            have = {m["id"] for m in kept}
            self.messages = kept + [m for m in snapshot if m["id"] not in have]
        elif kind == "STATE_SNAPSHOT":
            self.state = event["snapshot"]
        elif kind == "RUN_FINISHED":
            outcome = event.get("outcome") or {}
            self.pending = list(outcome.get("interrupts") or []) if outcome.get("type") == "interrupt" else []


def held_after(sent: list[dict], streamed: Streamed) -> list[dict]:
    """The messages the client holds once ``streamed`` is in, having sent ``sent``: what it sends next."""
    client = AguiClient("", {}, "")
    client.messages = copy.deepcopy(sent)
    for event in streamed.events:
        client.apply(event)
    return client.messages
