"""A real, external AG-UI agent for end-to-end tests: LangGraph + ag_ui_langgraph.

Pure-Python graph nodes (no LLM, no API key, no network) that pause with
``langgraph.types.interrupt(...)``, served by ``ag_ui_langgraph``'s
``add_langgraph_fastapi_endpoint`` under uvicorn. It runs in its own venv
(``.venv-langgraph``, from ``requirements-langgraph.txt``), never in the
project's ``.venv``:

    .venv-langgraph/bin/python tests/external/langgraph_agent.py --port 8765
    .venv-langgraph/bin/python -m tests.external.langgraph_agent --port 8765

It prints ``ready on http://127.0.0.1:PORT`` (flushed) once uvicorn listens;
``GET /approve/health`` (any agent path + ``health``) answers 200 too.

Endpoints (each a separate graph with its own in-memory checkpointer, so a
thread's state survives between runs for the life of the process, and the
same threadId on two paths names two unrelated threads):

``/approve/``  proposes a tool call ``issue_refund`` and interrupts once for
               approval (reason ``tool_call``, with ``toolCallId`` and an
               approve-with-edits ``responseSchema``). Resume payload
               ``{"approved": true}`` -> ``decision == "approved"`` (and a
               ToolMessage with the result), ``{"approved": false}`` ->
               ``"rejected"``, status ``cancelled`` -> ``"cancelled"``.
``/form/``     interrupts once for structured input (reason ``input_required``,
               ``responseSchema``, ``expiresAt`` one hour ahead); resolved ->
               ``decision == "submitted"`` with the payload in ``form``.
``/parallel/`` two parallel branches each call ``interrupt`` in the same
               superstep: one RUN_FINISHED carries two interrupts. Answered
               with one resume entry per interrupt. Needs the small
               ``_build_command_from_agui_resume`` override below (see the
               README): the stock mapping sends a single value LangGraph
               refuses when several interrupts are pending.
``/parallel-stock/`` the same graph with the stock ag_ui_langgraph mapping, to
               show what an unmodified agent does with a multi-entry resume.

``--default-config`` serves every graph in ag_ui_langgraph's own default
configuration instead (no interrupt outcome: CUSTOM on_interrupt events and a
plain RUN_FINISHED), as an agent registered with the ``langgraph-legacy``
dialect is served.
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import sys
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypedDict

import uvicorn
from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
from ag_ui_langgraph.interrupts import (
    DEFAULT_RESUME_SENTINEL_CANCELLED,
)
from fastapi import FastAPI
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

HOST = "127.0.0.1"

APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "editedArgs": {
            "type": "object",
            "description": "Full replacement of the tool args. Not merged.",
        },
    },
    "required": ["approved"],
}

FORM_SCHEMA = {
    "type": "object",
    "properties": {
        "quarter": {"type": "string", "enum": ["Q1", "Q2", "Q3", "Q4"]},
        "year": {"type": "integer", "minimum": 2000},
    },
    "required": ["quarter", "year"],
}


def is_cancelled(answer: Any) -> bool:
    """ag_ui_langgraph turns a single ``status: cancelled`` entry into this dict."""
    return isinstance(answer, dict) and bool(answer.get(DEFAULT_RESUME_SENTINEL_CANCELLED))


def decide(answer: Any) -> str:
    if is_cancelled(answer):
        return "cancelled"
    if isinstance(answer, dict) and answer.get("approved") is True:
        return "approved"
    return "rejected"


# --------------------------------------------------------------------------
# /approve/: one tool-bound approval.


class ApproveState(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    proposal: dict
    tool_call_id: str
    answer: Any
    decision: str
    history: Annotated[list, operator.add]


def propose(state: ApproveState) -> dict:
    # One tool call per thread: its id is stable across this thread's runs.
    tool_call_id = f"call_refund_{len(state.get('messages') or [])}"
    args = {"order": "A-1001", "amount": 42, "currency": "EUR"}
    return {
        "proposal": {"tool": "issue_refund", "args": args},
        "tool_call_id": tool_call_id,
        "answer": None,  # a thread can go round again after it finished
        "decision": None,
        "history": ["proposed"],
        "messages": [
            AIMessage(
                content="I propose refunding order A-1001 (42 EUR).",
                tool_calls=[{"id": tool_call_id, "name": "issue_refund", "args": args}],
            )
        ],
    }


def ask_approval(state: ApproveState) -> dict:
    answer = interrupt(
        {
            "reason": "tool_call",
            "message": "Refund 42 EUR on order A-1001?",
            "toolCallId": state["tool_call_id"],
            "responseSchema": APPROVAL_SCHEMA,
            "proposal": state["proposal"],  # extra keys only reach metadata.langgraph.raw
        }
    )
    # Everything below runs only in the resumed run.
    return {"answer": answer, "history": ["answered"]}


def execute(state: ApproveState) -> dict:
    answer = state.get("answer")
    decision = decide(answer)
    args = state["proposal"]["args"]
    if decision == "approved" and isinstance(answer.get("editedArgs"), dict):
        args = answer["editedArgs"]
    result = {
        "approved": f"refunded {args.get('amount')} {args.get('currency')} on {args.get('order')}",
        "rejected": "refund rejected by reviewer",
        "cancelled": "refund not executed: approval cancelled",
    }[decision]
    return {
        "decision": decision,
        "history": [decision],
        "messages": [
            ToolMessage(content=result, tool_call_id=state["tool_call_id"], name="issue_refund"),
            AIMessage(content=f"Done: {result}."),
        ],
    }


def build_approve(checkpointer) -> Any:
    graph = StateGraph(ApproveState)
    graph.add_node("propose", propose)
    graph.add_node("ask_approval", ask_approval)
    graph.add_node("execute", execute)
    graph.add_edge(START, "propose")
    graph.add_edge("propose", "ask_approval")
    graph.add_edge("ask_approval", "execute")
    graph.add_edge("execute", END)
    return graph.compile(checkpointer=checkpointer)


# --------------------------------------------------------------------------
# /form/: a non-tool input request with an expiry.


class FormState(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    form: Any
    decision: str


def ask_form(state: FormState, expires_in: timedelta = timedelta(hours=1)) -> dict:
    expires = datetime.now(UTC) + expires_in
    answer = interrupt(
        {
            "reason": "input_required",
            "message": "Which quarter and year should the filing cover?",
            "responseSchema": FORM_SCHEMA,
            "expiresAt": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    )
    if is_cancelled(answer):
        return {"decision": "cancelled", "form": None}
    return {"decision": "submitted", "form": answer}


def build_form(checkpointer, expires_in: timedelta = timedelta(hours=1)) -> Any:
    graph = StateGraph(FormState)
    graph.add_node("ask_form", lambda state: ask_form(state, expires_in))
    graph.add_edge(START, "ask_form")
    graph.add_edge("ask_form", END)
    return graph.compile(checkpointer=checkpointer)


# --------------------------------------------------------------------------
# /parallel/: two branches interrupt in the same superstep.


class ParallelState(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    decisions: Annotated[dict, operator.or_]
    summary: str


def _branch(name: str, message: str):
    def node(state: ParallelState) -> dict:
        answer = interrupt(
            {"reason": "confirmation", "message": message, "responseSchema": APPROVAL_SCHEMA}
        )
        return {"decisions": {name: decide(answer)}}

    node.__name__ = f"ask_{name}"
    return node


def summarize(state: ParallelState) -> dict:
    decisions = state.get("decisions") or {}
    return {"summary": ", ".join(f"{k}={v}" for k, v in sorted(decisions.items()))}


def build_parallel(checkpointer) -> Any:
    graph = StateGraph(ParallelState)
    graph.add_node("ask_email", _branch("email", "Send the summary email to a@example.com?"))
    graph.add_node("ask_invoice", _branch("invoice", "Issue invoice INV-7 for 120 EUR?"))
    graph.add_node("summarize", summarize)
    graph.add_edge(START, "ask_email")
    graph.add_edge(START, "ask_invoice")
    graph.add_edge(["ask_email", "ask_invoice"], "summarize")
    graph.add_edge("summarize", END)
    return graph.compile(checkpointer=checkpointer)


class MappedResumeAgent(LangGraphAgent):
    """Routes a multi-entry AG-UI resume to LangGraph by interrupt id.

    Stock ag_ui_langgraph 0.0.47 resumes several entries with
    ``Command(resume={"__agui_resume_map__": {...}})``: one value for the whole
    graph, which LangGraph 1.2 refuses while more than one interrupt is
    pending ("When there are multiple pending interrupts, you must specify the
    interrupt id when resuming"). LangGraph's own multi-resume is
    ``Command(resume={interrupt_id: value, ...})``, so each entry becomes its
    payload, or the same cancelled sentinel a single cancelled entry gets.
    With one entry and at most one open interrupt it keeps the stock mapping
    (which ignores the entry's interruptId). With several open interrupts even
    a single entry goes by id, so a partial resume answers that one interrupt
    and the run ends again on the ones left open.
    """

    def _build_command_from_agui_resume(self, entries, *, open_interrupts=None):
        if len(entries) <= 1 and len(open_interrupts or []) <= 1:
            return super()._build_command_from_agui_resume(entries, open_interrupts=open_interrupts)
        return Command(
            resume={
                e.interrupt_id: (
                    e.payload
                    if e.status == "resolved"
                    else {DEFAULT_RESUME_SENTINEL_CANCELLED: True, "interrupt_id": e.interrupt_id}
                )
                for e in entries
            }
        )


# --------------------------------------------------------------------------
# The app.


def make_agent(cls, name: str, graph, *, legacy_on_interrupt: bool, raw_events: bool,
               default_config: bool = False) -> LangGraphAgent:
    if default_config:
        # ag_ui_langgraph's own defaults, as most deployments serve it: one CUSTOM
        # on_interrupt per interrupt and a RUN_FINISHED without outcome
        # (emit_interrupt_outcome=False), RAW events and rawEvent copies on.
        return cls(name=name, graph=graph)
    return cls(
        name=name,
        graph=graph,
        emit_interrupt_outcome=True,
        enable_legacy_on_interrupt_event=legacy_on_interrupt,
        emit_raw_events=raw_events,
    )


def create_app(*, legacy_on_interrupt: bool = False, raw_events: bool = False,
               default_config: bool = False) -> FastAPI:
    # One checkpointer per graph: checkpoints are keyed by thread id alone, so
    # a shared one would mix two graphs' states under the same threadId.
    app = FastAPI(title="Countersign test agent (LangGraph)")
    opts = {"legacy_on_interrupt": legacy_on_interrupt, "raw_events": raw_events, "default_config": default_config}
    endpoints = [
        ("/approve/", make_agent(LangGraphAgent, "approve", build_approve(InMemorySaver()), **opts)),
        ("/form/", make_agent(LangGraphAgent, "form", build_form(InMemorySaver()), **opts)),
        # The same form, answerable for two seconds only: for expiry tests.
        ("/form-short/", make_agent(LangGraphAgent, "form_short",
                                    build_form(InMemorySaver(), timedelta(seconds=2)), **opts)),
        ("/parallel/", make_agent(MappedResumeAgent, "parallel", build_parallel(InMemorySaver()), **opts)),
        ("/parallel-stock/", make_agent(LangGraphAgent, "parallel_stock", build_parallel(InMemorySaver()), **opts)),
    ]
    for path, agent in endpoints:
        add_langgraph_fastapi_endpoint(app, agent, path)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--legacy-on-interrupt",
        action="store_true",
        help="also emit the legacy CUSTOM on_interrupt event before RUN_FINISHED "
        "(the package's default; off here so the stream carries only the outcome)",
    )
    parser.add_argument(
        "--raw-events",
        action="store_true",
        help="emit a RAW event per LangGraph event and rawEvent copies (the package's default; off here)",
    )
    parser.add_argument(
        "--default-config",
        action="store_true",
        help="serve every graph with ag_ui_langgraph's default configuration (no interrupt outcome: "
        "CUSTOM on_interrupt events and a plain RUN_FINISHED; RAW events on); overrides the two options above",
    )
    args = parser.parse_args(argv)
    app = create_app(legacy_on_interrupt=args.legacy_on_interrupt, raw_events=args.raw_events,
                     default_config=args.default_config)

    config = uvicorn.Config(app, host=HOST, port=args.port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)

    # uvicorn sets `started` once the socket listens; announce then.
    async def serve() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                await task  # re-raises a bind error and the like
                sys.exit(1)
            await asyncio.sleep(0.02)
        print(f"ready on http://{HOST}:{args.port}", flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()
