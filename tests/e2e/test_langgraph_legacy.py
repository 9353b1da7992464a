"""The hub against ag-ui-langgraph in its default configuration: CUSTOM on_interrupt, no interrupt outcome.

The agent (tests/external/langgraph_agent.py --default-config) runs in its
own process and venv, every graph served as ``LangGraphAgent(name, graph)``
with nothing else set: each pause ends with one CUSTOM on_interrupt per
interrupt and a RUN_FINISHED without outcome. Registered with the
``langgraph-legacy`` dialect, or with the default one (the pause is then
detected from the run's events, with nothing for the operator to set), its
interrupts reach the inbox and go back in the form ag-ui-langgraph takes.
"""

import httpx
import pytest

from interrupts.hub import events as event_log
from interrupts.hub import outbox, runs, streaming
from interrupts.models import Interrupt, Run
from interrupts.protocol.dialects.langgraph_legacy import CANCELLED, METADATA_KEY, interrupt_id

from .. import factories as make
from ..agui import post_run, resume_body
from .conftest import (
    decide,
    events,
    langgraph_agent,
    logged_in,
    paused,
    pending,
    resumed,
    start,
    state,
    wait_for,
)

# What a framework sends, and how the hub reads it, is the same whatever stores it: `make test` runs
# it on SQLite; the PostgreSQL pass leaves it out (``backend_free``) and runs the hub's own end to end.
pytestmark = pytest.mark.backend_free


@pytest.fixture(scope="module")
def default_langgraph(tmp_path_factory, hub):
    """The LangGraph agent in ag-ui-langgraph's default configuration, registered under both dialects."""
    with langgraph_agent(tmp_path_factory.mktemp("langgraph-default"), "--default-config") as port:
        with hub.api() as api:
            for name, path, dialect in [("lgd-approve", "approve", "langgraph-legacy"),
                                        # Stock ag-ui-langgraph: no subclass maps several answers.
                                        ("lgd-parallel", "parallel-stock", "langgraph-legacy"),
                                        ("lgd-as-agui", "approve", "agui"),
                                        ("lgd-parallel-agui", "parallel-stock", "agui")]:
                response = api.post("/api/agents/", json={"name": name, "url": f"http://127.0.0.1:{port}/{path}/",
                                                          "dialect": dialect})
                assert response.status_code == 201, response.text
                assert response.json()["dialect"] == dialect
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def lg(api, default_langgraph):
    return api


def approval(api):
    return paused(api, "lgd-approve")


def test_the_agent_s_run_pauses_with_an_interrupt_in_the_inbox(lg):
    run, asked = approval(lg)
    # Countersign's id for it (the agent sent none), and ag-ui-langgraph's own reading of the value.
    assert asked["interrupt_id"] == interrupt_id(run["run_id"], 0)
    assert (asked["reason"], asked["tool_call_id"]) == ("tool_call", "call_refund_0")
    assert asked["tool_name"] == "issue_refund" and asked["supports_edits"] is True
    assert asked["metadata"]["langgraph"]["raw"]["proposal"]["tool"] == "issue_refund"
    assert len(asked["metadata"][METADATA_KEY]["langgraphId"]) == 32
    ended = lg.get(f"/api/runs/{run['run_id']}/").json()
    assert ended["notice"] == "" and [i["id"] for i in ended["outcome"]["interrupts"]] == [asked["interrupt_id"]]
    # The log keeps what the agent sent: its on_interrupt and a RUN_FINISHED without outcome.
    sent = [e for e in events(lg, run["thread"]) if e["run"] == run["run_id"]]
    assert [e["type"] for e in sent].count("CUSTOM") == 1 and "outcome" not in sent[-1]["payload"]


def test_a_dialect_nobody_knows_is_refused_with_the_choices(lg):
    refused = lg.post("/api/agents/", json={"name": "lgd-odd", "url": "http://127.0.0.1:9/x/", "dialect": "crewai"})
    assert refused.status_code == 400, refused.text
    assert "dialect" in refused.json()["fields"] and "crewai" in str(refused.json()["fields"]["dialect"])
    lg.post("/api/agents/", json={"name": "lgd-switch", "url": "http://127.0.0.1:9/x/"})
    assert lg.get("/api/agents/lgd-switch/").json()["dialect"] == "agui"  # the default
    changed = lg.patch("/api/agents/lgd-switch/", json={"dialect": "langgraph-legacy"})
    assert changed.status_code == 200 and changed.json()["dialect"] == "langgraph-legacy", changed.text


def test_approve_with_edits(lg):
    run, asked = approval(lg)
    edited = {**asked["proposed_args"], "amount": 1}
    decide(lg, asked, action="edit", edited_args=edited)
    done = resumed(lg, asked)
    assert done["status"] == "succeeded"
    [sent] = done["input"]["resume"]  # one interrupt: the AG-UI entry, which ag-ui-langgraph takes as it is
    assert sent["interruptId"] == asked["interrupt_id"] and "command" not in done["input"]["forwardedProps"]
    assert state(lg, run["thread"])["decision"] == "approved"
    results = [m["content"] for m in lg.get(f"/api/threads/{run['thread']}/").json()["messages"]
               if m.get("role") == "tool"]
    assert results == ["refunded 1 EUR on A-1001"]


def test_cancel(lg):
    run, asked = approval(lg)
    decide(lg, asked, action="cancel")
    assert resumed(lg, asked)["status"] == "succeeded"
    assert state(lg, run["thread"])["decision"] == "cancelled"


def test_parallel_interrupts_on_stock_ag_ui_langgraph(lg):
    run = start(lg, "lgd-parallel")
    both = wait_for(lambda: len(found := pending(lg, run["thread"])) == 2 and found)
    assert [b["interrupt_id"] for b in both] == [interrupt_id(run["run_id"], 0), interrupt_id(run["run_id"], 1)]
    decide(lg, both[0], action="approve")
    decide(lg, both[1], action="cancel")
    done = resumed(lg, both[1])
    assert done["status"] == "succeeded", done
    # Recorded: the contract's entries; sent: LangGraph's own map by its ids.
    assert [e["status"] for e in done["input"]["resume"]] == ["resolved", "cancelled"]
    ids = [b["metadata"][METADATA_KEY]["langgraphId"] for b in both]
    assert done["input"]["forwardedProps"]["command"]["resume"] == {
        ids[0]: done["input"]["resume"][0]["payload"],
        ids[1]: {CANCELLED: True, "interrupt_id": ids[1]}}
    summary = state(lg, run["thread"])["summary"]
    assert sorted(summary.split(", ")) == ["email=approved", "invoice=cancelled"]


def clean(streamed) -> bool:
    """ag-ui-validate finds nothing wrong: no error, no warning, and only the notes every stock
    ag-ui-langgraph stream earns (no event timestamps, the unprefixed name 'on_interrupt'), which
    are the agent's own events as it sent them."""
    notes = {"AGUI902", "AGUI903"}
    assert streamed.problems(severities=("error", "warning")) == [], streamed.problems()
    assert {d.rule for d in streamed.report.diagnostics} <= notes, streamed.problems()
    return True


@pytest.mark.parametrize("agent", ["lgd-parallel", "lgd-parallel-agui"])  # registered, and detected
async def test_through_the_gateway_a_client_sees_the_outcome_and_resumes_once(hub, default_langgraph, agent):
    headers = {"Authorization": f"Token {hub.token}"}
    url = f"{hub.url}/agui/{agent}/"
    thread = f"gw-{agent}"
    body = {"threadId": thread, "runId": "r1", "messages": [], "state": {}, "tools": [], "context": [],
            "forwardedProps": {}}
    first = await post_run(url, body, headers)
    assert clean(first)
    # The terminal event as Countersign raised it: an outcome with the ids a resume names.
    asked = first.interrupts
    assert [a["id"] for a in asked] == [interrupt_id("r1", 0), interrupt_id("r1", 1)]
    assert first.types.count("CUSTOM") == 2
    resume = [{"interruptId": asked[0]["id"], "status": "resolved", "payload": {"approved": True}},
              {"interruptId": asked[1]["id"], "status": "resolved", "payload": {"approved": False}}]
    second = await post_run(url, resume_body(first, thread, "r2", resume), headers)
    assert clean(second)
    assert second.last["type"] == "RUN_FINISHED" and not second.interrupts
    assert second.snapshot("STATE_SNAPSHOT")["summary"] == "email=approved, invoice=rejected"
    again = await post_run(url, resume_body(first, thread, "r3", resume), headers)
    assert again.events == second.events  # recorded, not re-run
    with httpx.Client(base_url=hub.url, headers=headers) as api:
        started = [e["run"] for e in events(api, thread) if e["type"] == "RUN_STARTED"]
    assert started == ["r1", "r2"]


def agents_page(hub) -> str:
    browser = logged_in(hub)
    try:
        page = browser.get("/registry/")
    finally:
        browser.close()
    assert page.status_code == 200
    return page.text.replace("&#x27;", "'")


@pytest.mark.parametrize("action, decision", [("approve", "approved"), ("reject", "rejected")])
def test_a_default_agent_that_pauses_the_langgraph_way_is_detected_and_resumed(hub, lg, action, decision):
    """Registered with the default dialect, nothing set: the pause is in the inbox, not read as a success."""
    run, asked = paused(lg, "lgd-as-agui")
    ended = lg.get(f"/api/runs/{run['run_id']}/").json()
    assert ended["notice"] == "" and [i["id"] for i in ended["outcome"]["interrupts"]] == [asked["interrupt_id"]]
    assert asked["interrupt_id"] == interrupt_id(run["run_id"], 0)
    assert (asked["tool_name"], asked["proposed_args"]["amount"]) == ("issue_refund", 42)
    decide(lg, asked, action=action)
    done = resumed(lg, asked)
    assert done["status"] == "succeeded", done
    [sent] = done["input"]["resume"]
    assert sent["interruptId"] == asked["interrupt_id"] and "command" not in done["input"]["forwardedProps"]
    assert state(lg, run["thread"])["decision"] == decision
    tool_results = [m["content"] for m in lg.get(f"/api/threads/{run['thread']}/").json()["messages"]
                    if m.get("role") == "tool"]
    assert tool_results == (["refunded 42 EUR on A-1001"] if action == "approve" else ["refund rejected by reviewer"])
    # The Agents page says how it pauses, and that it was detected.
    page = agents_page(hub)
    mine = page[page.index("<strong>lgd-as-agui</strong>"):]
    mine = mine[:mine.index("</tr>")]
    assert "LangGraph's on_interrupt event (detected)" in mine and "0 refused" in mine


def test_a_default_agent_s_parallel_pause_is_answered_by_langgraph_s_ids(lg):
    run = start(lg, "lgd-parallel-agui")
    both = wait_for(lambda: len(found := pending(lg, run["thread"])) == 2 and found)
    decide(lg, both[0], action="approve")
    decide(lg, both[1], action="reject")
    done = resumed(lg, both[1])
    assert done["status"] == "succeeded", done
    ids = [b["metadata"][METADATA_KEY]["langgraphId"] for b in both]
    assert done["input"]["forwardedProps"]["command"]["resume"].keys() == set(ids)
    assert sorted(state(lg, run["thread"])["summary"].split(", ")) == ["email=approved", "invoice=rejected"]


@pytest.mark.django_db(transaction=True)
def test_a_run_recovered_from_its_recorded_events_raises_the_same_interrupts():
    """The streamer's process died after the agent's RUN_FINISHED was recorded: the ids are made again, the same."""
    agent = make.agent(url="http://127.0.0.1:9/never/", dialect="langgraph-legacy")
    run = runs.start_run(agent, user=make.user(), message="hi")
    assert outbox.claim_due(1, "w") == [(run.pk, False)]
    run = Run.objects.select_related("thread", "agent").get(pk=run.pk)
    ids = ["5811277ff9343aae09c19d5370933b3d", "ca78f478a302aa11be0f406e9654e0c5"]
    sent = [{"type": "RUN_STARTED", "threadId": run.thread.thread_id, "runId": run.run_id},
            *({"type": "CUSTOM", "name": "on_interrupt", "value": f'{{"message": "{m}"}}',
               "rawEvent": {"value": {"message": m}, "id": i}} for m, i in zip("ab", ids, strict=False)),
            {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id}]
    assert event_log.append_many(run, sent, "w")
    streaming.recover(run, "test-worker")
    raised = list(Interrupt.objects.filter(run=run).order_by("pk").values_list("interrupt_id", "message", "raw"))
    assert [(i, m) for i, m, _ in raised] == [(interrupt_id(run.run_id, 0), "a"), (interrupt_id(run.run_id, 1), "b")]
    assert [r["metadata"][METADATA_KEY]["langgraphId"] for _, _, r in raised] == ids
    assert Run.objects.get(pk=run.pk).status == Run.Status.INTERRUPTED


def test_the_thread_page_shows_a_legacy_pause_as_a_pause_not_a_success(lg, hub):
    run, asked = approval(lg)
    browser = logged_in(hub)
    try:
        page = browser.get(f"/threads/{run['thread']}/").text
    finally:
        browser.close()
    assert "paused for 1 decision" in page and asked["interrupt_id"] in page
    assert "outcome-success" not in page
