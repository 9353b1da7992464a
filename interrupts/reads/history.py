"""Fold a thread's event log, and what people decided on it, into what a person reads.

``fold`` is pure data in, plain dicts out (no queries, no HTML): the thread
page renders its items with templates, first for the whole log, then for each
slice that arrives live. A slice may continue something an earlier slice
began (a text message's next delta, a tool call's next args); such items say
so (``continues``) and the page's script appends them to the element they
continue instead of adding a new one.

Decisions are not events: nobody's answer is in the agent's log. ``page`` and
``since`` read them beside the log (one query for every interrupt of the runs
shown, with its decisions and who took them) and ``fold`` places each run's
decisions right after the run's end, where they happened: between the pause
and the resumed run's start. A withdrawn decision (superseded: revised, undone,
or reopened after the agent refused it) stays, marked withdrawn, as the audit
trail keeps it. Each read costs a fixed number of queries, whatever the number
of events, runs or decisions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Q, Subquery, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.utils import timezone
from django.utils.text import Truncator

from ..conf import REQUEST_LABEL_CHARS, settings
from ..models import Decision, Event, Interrupt, Run, Thread
from ..protocol import storable
from ..protocol.errors import ProtocolError
from ..protocol.state import apply_delta, json_size
from ..rules.words import OUTCOME_WORDS, deciders, outcome_words
from . import selectors

# A state larger than this is shown whole at each snapshot, not compared
# with the one before, and not followed through its deltas: replaying an
# agent's patches copies the state each time, on every read of the page.
STATE_COMPARED_BYTES = 64 * 1024
# Changes one state item lists; past it, the count says how many more.
STATE_CHANGES_SHOWN = 20
# Top-level keys of a snapshot listed (as the json_tree filter lists at most 500 items).
SNAPSHOT_KEYS_SHOWN = 500
# Characters of a value quoted in a state change or a decision's answer.
QUOTED_CHARS = 160

UNKNOWN = object()  # the state before a slice, when nothing says what it was


@dataclass
class Item:
    kind: str  # run-start, run-end, decisions, text, tool-call, tool-result, state, messages, note, event
    seq: int
    run_id: str = ""
    key: str = ""  # message id or tool call id: what a later delta continues
    continues: bool = False
    data: dict[str, Any] = field(default_factory=dict)


def _args_text(text: str) -> str:
    """Tool-call args as indented JSON when they parse (and can be shown), as sent otherwise."""
    decoded, value = storable.embedded(text)
    return json.dumps(value, indent=2, ensure_ascii=False) if decoded else text


def _raised(run_id: str, interrupt: dict, names: dict, suspended: dict) -> dict:
    """One raised interrupt of a run's end: its id, and the subagent that asked it (run id, name) if any."""
    sub = selectors.raw_subagent_run_id(interrupt) or suspended.get((run_id, interrupt.get("id")))
    return {"id": interrupt.get("id"), "subagent_run_id": sub, "subagent_name": names.get((run_id, sub))}


def _quoted(value) -> str:
    text = value if isinstance(value, str) and not isinstance(value, bool) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= QUOTED_CHARS else text[:QUOTED_CHARS - 1] + "…"


def _pointer(path: list) -> str:
    return "".join("/" + str(step).replace("~", "~0").replace("/", "~1") for step in path) or "/"


def _same(a, b) -> bool:
    # JSON's true is not 1, though Python's True == 1.
    return type(a) is type(b) and a == b


def state_changes(before, after) -> list[dict]:
    """What changed from ``before`` to ``after``, as JSON pointers: [{op: added|removed|changed, path, ...}].

    Objects are compared key by key and arrays index by index, down to the
    values that differ; walked with a stack, not recursion (agents choose how
    deep their state nests).
    """
    changes: list[dict] = []
    stack = [([], before, after)]
    while stack:
        path, old, new = stack.pop()
        if old is UNKNOWN:
            changes.append({"op": "added", "path": _pointer(path), "after": _quoted(new)})
        elif new is UNKNOWN:
            changes.append({"op": "removed", "path": _pointer(path), "before": _quoted(old)})
        elif isinstance(old, dict) and isinstance(new, dict):
            keys = [*new, *(k for k in old if k not in new)]
            stack.extend(reversed([([*path, k], old.get(k, UNKNOWN), new.get(k, UNKNOWN)) for k in keys]))
        elif isinstance(old, list) and isinstance(new, list):
            stack.extend(reversed([([*path, i], old[i] if i < len(old) else UNKNOWN,
                                    new[i] if i < len(new) else UNKNOWN)
                                   for i in range(max(len(old), len(new)))]))
        elif not _same(old, new):
            changes.append({"op": "changed", "path": _pointer(path), "before": _quoted(old), "after": _quoted(new)})
    return changes


_DELTA_WORDS = {"add": "added", "replace": "set", "remove": "removed", "move": "moved", "copy": "copied",
                "test": "checked"}


def delta_words(delta) -> list[str]:
    """Each JSON Patch operation in words: "set /count to 3", "removed /x", "moved /a to /b"."""
    if not isinstance(delta, list):
        return ["a patch that is not a list of operations"]
    words = []
    for operation in delta:
        if not isinstance(operation, dict):
            words.append("an operation that is not an object")
            continue
        op, path = operation.get("op"), _quoted(operation.get("path", ""))
        verb = _DELTA_WORDS.get(op, f"{_quoted(op)} (not a JSON Patch operation)")
        if op in ("move", "copy"):
            words.append(f"{verb} {_quoted(operation.get('from', ''))} to {path}")
        elif op in ("add", "replace", "test") and "value" in operation:
            words.append(f"{verb} {path} {'to' if op == 'replace' else '='} {_quoted(operation['value'])}")
        else:
            words.append(f"{verb} {path}")
    return words


def _small(state) -> bool:
    return state is not UNKNOWN and json_size(state, STATE_COMPARED_BYTES) <= STATE_COMPARED_BYTES


def _next_state(state, kind: str, payload: dict, max_bytes: int):
    """The state after one STATE_SNAPSHOT or STATE_DELTA, as the log folded it (a refused delta changes nothing)."""
    if kind == "STATE_SNAPSHOT":
        return payload.get("snapshot")
    if not _small(state):
        return UNKNOWN
    try:
        return apply_delta(state, payload.get("delta"), max_bytes=max_bytes)
    except ProtocolError:  # DeltaRefused: the thread kept its state (hub.events._folded)
        return state


def _whole(snapshot) -> dict:
    """A snapshot to show whole: with its top-level keys listed (each value a collapsed tree) when an object."""
    top = list(snapshot.items())[:SNAPSHOT_KEYS_SHOWN] if isinstance(snapshot, dict) else None
    return {"snapshot": snapshot, "top": top, "keys": len(snapshot) if isinstance(snapshot, dict) else None}


def _state_item(seq: int, run_id: str, before, snapshot) -> Item:
    if before is UNKNOWN or not (_small(before) and _small(snapshot)):
        return Item("state", seq, run_id, data=_whole(snapshot))
    changes = state_changes(before, snapshot)
    if not changes:  # the same state again: nothing to read
        return Item("state", seq, run_id, data={"repeat": True})
    return Item("state", seq, run_id, data={**_whole(snapshot), "changes": changes[:STATE_CHANGES_SHOWN],
                                            "changed": len(changes),
                                            "more": max(len(changes) - STATE_CHANGES_SHOWN, 0)})


def _tool_calls_in(messages) -> dict[str, str]:
    """toolCallId -> tool name, from the assistant messages of a MESSAGES_SNAPSHOT (or a run's input)."""
    names = {}
    for message in messages if isinstance(messages, list) else []:
        for call in (message.get("toolCalls") or []) if isinstance(message, dict) else []:
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                function = call.get("function")
                name = function.get("name") if isinstance(function, dict) else None
                if isinstance(name, str) and name:
                    names[call["id"]] = name
    return names


def fold(events, said: dict[str, str] | None = None, raised: dict[str, dict] | None = None, *,
         calls: dict[str, str] | None = None, state=UNKNOWN, decided: dict[str, Item] | None = None,
         max_state_bytes: int = 8 * 1024 * 1024) -> list[Item]:
    """Items for events given as (seq, type, payload, run_id, from_agent), in order.

    ``said`` maps a run id to the user message its input carried, shown at
    the run's start (it is part of the input, not of the agent's stream).
    ``raised`` maps a run that paused to its outcome as Countersign read it:
    a run of another dialect (LangGraph's on_interrupt) ends with a
    RUN_FINISHED that says nothing of its interrupts, and must not read as success.
    ``calls`` names the tool calls made before these events (toolCallId ->
    tool name), so a result can say whose it is; ``state`` is the thread's
    state before them (``UNKNOWN``: the first snapshot is shown whole), so a
    snapshot shows only what changed; ``decided`` holds each paused run's
    decisions item (``decisions_items``), placed after that run's end.
    """
    said, raised, decided = said or {}, raised or {}, decided or {}
    names = dict(calls or {})
    items: list[Item] = []
    open_text: dict[str, Item] = {}
    open_calls: dict[str, Item] = {}
    # Per run: each subagent run's name (SUBAGENT_STARTED), and the interrupts a suspended one raised.
    subagent_names: dict[tuple[str, str], str] = {}
    suspended: dict[tuple[str, str], str] = {}

    for seq, kind, payload, run_id, from_agent in events:
        if kind in ("SUBAGENT_STARTED", "SUBAGENT_FINISHED"):
            selectors.read_subagent_event(run_id, kind, payload, subagent_names, suspended)
        if kind == "RUN_STARTED":
            items.append(Item("run-start", seq, run_id, data={"parent": payload.get("parentRunId"),
                                                                "user": said.get(run_id)}))
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            if kind == "RUN_FINISHED" and from_agent and not payload.get("outcome") and run_id in raised:
                payload = {**payload, "outcome": raised[run_id]}  # the dialect's reading
            outcome = (payload.get("outcome") or {}).get("type", "success") if kind == "RUN_FINISHED" else "error"
            items.append(Item("run-end", seq, run_id, data={
                "outcome": outcome,
                # Each raised interrupt's id, and the subagent run that raised it when the agent says so.
                "interrupts": [_raised(run_id, i, subagent_names, suspended)
                               for i in (payload.get("outcome") or {}).get("interrupts", [])],
                "code": payload.get("code"),
                "message": payload.get("message"),
                "from_agent": from_agent,
            }))
            if outcome == "interrupt" and run_id in decided:
                items.append(decided[run_id])
        elif kind == "TEXT_MESSAGE_START":
            item = Item("text", seq, run_id, key=payload.get("messageId", ""), data={
                "role": payload.get("role", "assistant"), "text": ""})
            open_text[item.key] = item
            items.append(item)
        elif kind in ("TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CHUNK"):
            key = payload.get("messageId", "")
            delta = payload.get("delta") or ""
            if key in open_text:
                open_text[key].data["text"] += delta
            else:
                items.append(Item("text", seq, run_id, key=key, continues=True,
                                  data={"role": payload.get("role", "assistant"), "text": delta}))
        elif kind == "TOOL_CALL_START":
            item = Item("tool-call", seq, run_id, key=payload.get("toolCallId", ""),
                        data={"name": payload.get("toolCallName", ""), "args": ""})
            names[item.key] = item.data["name"]
            open_calls[item.key] = item
            items.append(item)
        elif kind in ("TOOL_CALL_ARGS", "TOOL_CALL_CHUNK"):
            key = payload.get("toolCallId", "")
            delta = payload.get("delta") or ""
            if key in open_calls:
                open_calls[key].data["args"] += delta
            else:
                items.append(Item("tool-call", seq, run_id, key=key, continues=True, data={"name": "", "args": delta}))
        elif kind == "TOOL_CALL_END":
            key = payload.get("toolCallId", "")
            if key in open_calls:
                open_calls[key].data["args"] = _args_text(open_calls[key].data["args"])
        elif kind == "TOOL_CALL_RESULT":
            key = payload.get("toolCallId", "")
            items.append(Item("tool-result", seq, run_id, key=key,
                              data={"name": names.get(key, ""), "content": _args_text(payload.get("content") or "")}))
        elif kind == "STATE_SNAPSHOT":
            items.append(_state_item(seq, run_id, state, payload.get("snapshot")))
            state = _next_state(state, kind, payload, max_state_bytes)
        elif kind == "STATE_DELTA":
            items.append(Item("state", seq, run_id, data={"delta": payload.get("delta"),
                                                          "words": delta_words(payload.get("delta"))}))
            state = _next_state(state, kind, payload, max_state_bytes)
        elif kind == "MESSAGES_SNAPSHOT":
            names.update({k: v for k, v in _tool_calls_in(payload.get("messages")).items() if k not in names})
            items.append(Item("messages", seq, run_id, data={"count": len(payload.get("messages") or []),
                                                               "messages": payload.get("messages")}))
        elif kind == "CUSTOM":
            items.append(Item("note", seq, run_id, data={"name": payload.get("name"), "value": payload.get("value"),
                                                           "from_agent": from_agent}))
        elif kind == "TEXT_MESSAGE_END":
            continue
        else:
            items.append(Item("event", seq, run_id, data={"type": kind, "payload": payload}))
    return items


# --- decisions, in words ---------------------------------------------------------------

# Each answer's words ("Approved", "Rejected", ...) are rules.words.outcome_words', as on every page.
_WORDS_ACTION = {words: action for action, words in OUTCOME_WORDS.items()}


DECISION_COLUMNS = ("run__run_id", "interrupt_id", "status", "closed_at", "closed_reason",
                    "decisions__pk", "decisions__action", "decisions__status", "decisions__payload",
                    "decisions__edited_args", "decisions__comment", "decisions__created_at",
                    "decisions__superseded_at", "decisions__user__username", "decisions__user__first_name",
                    "decisions__user__last_name", "message", "tool_name", "decisions__grant",
                    "decisions__by_policy", "decisions__policy")


def request_label(message: str, tool_name: str) -> str:
    """A request in words for a list: its message, else the call it would make (the id goes in a tooltip)."""
    message = " ".join((message or "").split())
    if message:
        return Truncator(message).chars(REQUEST_LABEL_CHARS)
    return f"the {tool_name} call" if tool_name else "a request"


def decisions_items(rows, now: datetime) -> dict[str, Item]:
    """Each paused run's "decisions" item, from rows of ``DECISION_COLUMNS`` (an interrupt and one decision each).

    An entry per decision (withdrawn ones too, marked), and one for each
    interrupt that closed with none (expired, or closed with its run) or still
    waits. ``version`` changes whenever any of that does: the live page
    replaces the item it shows only then.
    """
    runs: dict[str, dict[str, list]] = {}
    closed: dict[tuple[str, str], tuple] = {}
    labels: dict[tuple[str, str], str] = {}
    for (run_id, interrupt_id, status, closed_at, closed_reason, pk, action, decided, payload, edited,
         comment, at, withdrawn_at, username, first, last, message, tool_name, grant, by_policy, policy) in rows:
        entries = runs.setdefault(run_id, {}).setdefault(interrupt_id, [])
        closed[run_id, interrupt_id] = (status, closed_at, closed_reason)
        labels[run_id, interrupt_id] = request_label(message, tool_name)
        if pk is None:
            continue
        words = outcome_words(Decision(action=action, status=decided, payload=payload))
        answer = None
        if words == "Answered" and payload is not None:
            answer = _quoted(payload)
        elif words == "Approved with edits" and edited is not None:
            answer = _quoted(edited)
        entries.append({"interrupt": interrupt_id, "words": words, "action": _WORDS_ACTION[words],
                        "who": deciders(f"{first} {last}".strip() or username, grant=grant, by_policy=by_policy,
                                        policy=policy),
                        "comment": comment, "answer": answer,
                        "at": at, "withdrawn_at": withdrawn_at, "grant": grant})
    items = {}
    for run_id, interrupts in runs.items():
        entries, counts = [], {"decided": 0, "withdrawn": 0, "closed": 0, "waiting": 0}
        for interrupt_id, taken in interrupts.items():
            status, closed_at, closed_reason = closed[run_id, interrupt_id]
            entries += taken
            counts["decided"] += len(taken)
            counts["withdrawn"] += sum(1 for d in taken if d["withdrawn_at"])
            standing = [d for d in taken if not d["withdrawn_at"]]
            if status == "pending":
                counts["waiting"] += 1
                entries.append({"interrupt": interrupt_id, "words": "Waiting", "action": "waiting",
                                "who": "", "comment": "", "answer": None, "at": None,
                                "withdrawn_at": None, "waiting": True,
                                "standing": len(standing)})
            elif not standing:
                counts["closed"] += 1
                entries.append({"interrupt": interrupt_id, "words": "Expired" if status == "expired" else "Closed",
                                "action": "expired" if status == "expired" else "closed", "who": "",
                                "comment": closed_reason, "answer": None, "at": closed_at,
                                "withdrawn_at": None})
        for entry in entries:  # what each was about, in words; its id stays for a tooltip
            entry["label"] = labels[run_id, entry["interrupt"]]
        # In the order they happened; what still waits, last.
        entries.sort(key=lambda e: (e.get("waiting", False), e["at"] or now))
        version = "{decided}.{withdrawn}.{closed}.{waiting}".format(**counts)
        items[run_id] = Item("decisions", 0, run_id, key=run_id, data={"entries": entries, "version": version})
    return items


# --- reading it from the database ---------------------------------------------------------


@dataclass
class Slice:
    items: list[Item]
    last_seq: int  # the sequence number the slice reaches (``after`` when it is empty)
    count: int  # events read
    pending: list[str] = field(default_factory=list)  # interrupt ids still waiting (``page`` only)


def _decision_rows(thread: Thread, runs: Q):
    return (Interrupt.objects.filter(runs, run__thread=thread)
            .order_by("created_at", "pk", "decisions__created_at", "decisions__pk")
            .values_list(*DECISION_COLUMNS))


def _tool_names(thread: Thread, ids: set[str]) -> dict[str, str]:
    """toolCallId -> tool name, for calls started earlier in the thread (one query)."""
    # Compared as text (->>): the payload column is json, not jsonb, on PostgreSQL (models.ExactJSONField).
    call = Cast(KeyTextTransform("toolCallId", "payload"), TextField())
    name = Cast(KeyTextTransform("toolCallName", "payload"), TextField())
    return dict(Event.objects.filter(thread=thread, type="TOOL_CALL_START").annotate(call=call, name=name)
                .filter(call__in=sorted(ids)).order_by().values_list("call", "name"))


def _state_at(thread: Thread, seq: int, max_bytes: int):
    """The thread's state as its log stood at ``seq``: the last snapshot up to it, with the deltas after (one query)."""
    last = (Event.objects.filter(thread=thread, type="STATE_SNAPSHOT", seq__lte=seq)
            .order_by("-seq").values("seq")[:1])
    rows = (Event.objects.filter(thread=thread, type__in=("STATE_SNAPSHOT", "STATE_DELTA"), seq__lte=seq,
                                 seq__gte=Subquery(last)).order_by("seq").values_list("type", "payload"))
    state = UNKNOWN
    for kind, payload in rows:
        state = _next_state(state, kind, payload or {}, max_bytes)
    return state


def _read(thread: Thread, after: int, limit: int | None, runs: Q, live: bool) -> Slice:
    events = selectors.thread_events(thread, after=after, limit=limit)
    said, raised = selectors.run_facts(thread)
    rows = list(_decision_rows(thread, runs))
    max_bytes = settings.COUNTERSIGN_MAX_EVENT_BYTES
    calls, state = {}, UNKNOWN
    if after:
        # What this slice continues: the tool calls its results answer, and the state its snapshots change.
        known = {p.get("toolCallId") for _, kind, p, _, _ in events if kind == "TOOL_CALL_START"}
        for _, kind, p, _, _ in events:
            if kind == "MESSAGES_SNAPSHOT":
                known |= set(_tool_calls_in(p.get("messages")))
        wanted = {p.get("toolCallId") for _, kind, p, _, _ in events if kind == "TOOL_CALL_RESULT"} - known - {None}
        if wanted:
            calls = _tool_names(thread, {w for w in wanted if isinstance(w, str)})
        if any(kind == "STATE_SNAPSHOT" for _, kind, *_ in events):
            state = _state_at(thread, after, max_bytes)
    decided = decisions_items(rows, timezone.now())
    items = fold(events, said, raised, calls=calls, state=state, decided=decided, max_state_bytes=max_bytes)
    if live:
        # Decisions of a run that ended before this slice (they changed since): the page puts them after its end.
        placed = {item.key for item in items if item.kind == "decisions"}
        items += [item for run_id, item in decided.items() if run_id not in placed]
    pending = list(dict.fromkeys(r[1] for r in rows if r[2] == Interrupt.Status.PENDING))
    return Slice(items, events[-1][0] if events else after, len(events), pending)


def page(thread: Thread, limit: int) -> Slice:
    """The thread's history from the start (at most ``limit`` events), with every run's decisions.

    Also says which interrupts still wait (``pending``), read with the decisions.
    """
    return _read(thread, 0, limit, Q(), live=False)


def since(thread: Thread, after: int, limit: int) -> Slice:
    """The history after ``after``, for a live page: its events, and the decisions of the runs that end in
    it and of the thread's latest paused run, whose decisions are the only ones that can still change (the
    thread gate starts nothing while a decision is pending or an answer refused)."""
    latest = (Run.objects.filter(thread=thread, status=Run.Status.INTERRUPTED)
              .order_by("-created_at", "-pk").values("pk")[:1])
    ending = Q(run__in=Run.objects.filter(thread=thread, events__seq__gt=after, events__type="RUN_FINISHED"))
    return _read(thread, after, limit, Q(run__in=Subquery(latest)) | ending, live=True)


# --- the Runs list --------------------------------------------------------------------------


def run_words(run: Run, pending: int, now: datetime) -> str:
    """Where a run stands, in words: streaming, paused for 2 decisions, finished, waiting for the agent…"""
    if run.awaiting_agent:
        return f"waiting for the agent (attempt {run.attempts} failed)"
    if run.status == Run.Status.QUEUED and run.resume_key and run.retry_at and run.retry_at > now:
        return "queued, held a few seconds for undo"  # runs.queue_resume holds a person's decision
    if run.status == Run.Status.INTERRUPTED:
        paused = f"paused for {pending} decision{'s' if pending != 1 else ''}" if pending else "paused, decided"
        # C22: its client's tool calls are shown beside the pause, not answered by the resume.
        return f"{paused}; {run.waiting_on_client}" if run.waiting_on_client else paused
    if run.status == Run.Status.SUCCEEDED:
        return run.waiting_on_client or "finished"  # C21: a success that left calls pending is not finished
    if run.status == Run.Status.FAILED:
        if run.error_code == "CANCELLED_BY_OPERATOR":
            return "stopped by an operator"
        return f"failed: {run.error_code}" if run.error_code else "failed"
    return run.get_status_display().lower()  # queued, streaming, cancelled


def runs(thread: Thread) -> list[Run]:
    """The thread's runs, oldest first, each with ``pending`` (interrupts waiting) and ``words`` (one query)."""
    waiting = Count("interrupts", filter=Q(interrupts__status=Interrupt.Status.PENDING))
    listed = list(thread.runs.annotate(pending=waiting).order_by("created_at", "pk"))
    now = timezone.now()
    for run in listed:
        run.words = run_words(run, run.pending, now)
    return listed
