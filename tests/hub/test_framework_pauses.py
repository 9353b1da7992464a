"""Framework pauses recorded from their captured streams: the detected dialect, the real action, the resume.

Streams from tests/protocol/fixtures/frameworks/ (real adapters), fed through
the hub's own recording (``streaming.recover`` reads recorded events exactly
as a live stream's end is read).
"""

import json
from pathlib import Path

import pytest
from django.urls import reverse

from interrupts.hub import decisions, outbox, runs, streaming
from interrupts.hub import events as event_log
from interrupts.models import Agent, Interrupt, Run
from interrupts.protocol import dialects, signing
from interrupts.protocol.dialects.langgraph_legacy import METADATA_KEY, interrupt_id

from .. import factories as make

pytestmark = pytest.mark.django_db(transaction=True)

FIXTURES = Path(__file__).parents[1] / "protocol" / "fixtures" / "frameworks"


def recorded(agent: Agent, events: list[dict]) -> Run:
    """A run of ``agent`` whose stream was ``events`` (their thread and run ids made the run's), ended."""
    run = runs.start_run(agent, user=make.user(), message="hi")
    assert outbox.claim_due(1, "w") == [(run.pk, False)]
    run = Run.objects.select_related("thread", "agent").get(pk=run.pk)
    ids = {"threadId": run.thread.thread_id, "runId": run.run_id}
    sent = [{**event, **{k: v for k, v in ids.items() if k in event}} for event in events]
    assert event_log.append_many(run, sent, "w")
    streaming.recover(run, "w")
    return Run.objects.select_related("thread", "agent").get(pk=run.pk)


def captured(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]


def resume_of(run: Run) -> dict:
    return Run.objects.get(parent=run).input


def test_a_default_agent_pausing_the_langgraph_way_reaches_the_inbox_and_is_resumed_that_way():
    agent = make.agent()  # the default dialect: nothing set
    assert agent.dialect == dialects.AGUI
    lg_ids = ["5811277ff9343aae09c19d5370933b3d", "ca78f478a302aa11be0f406e9654e0c5"]
    events = [{"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
              *({"type": "CUSTOM", "name": "on_interrupt", "value": json.dumps({"message": m}),
                 "rawEvent": {"value": {"message": m}, "id": i}} for m, i in zip("ab", lg_ids, strict=False)),
              {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}]
    run = recorded(agent, events)
    assert run.status == Run.Status.INTERRUPTED and run.notice == ""  # not a success, and nothing to set
    asked = list(Interrupt.objects.filter(run=run).order_by("pk"))
    assert [i.interrupt_id for i in asked] == [interrupt_id(run.run_id, 0), interrupt_id(run.run_id, 1)]
    assert Agent.objects.get(pk=agent.pk).paused_as == dialects.LANGGRAPH_LEGACY
    reviewer = make.user()
    decisions.decide(asked[0], reviewer, "resolved", {"approved": True})
    decisions.decide(asked[1], reviewer, "cancelled")
    sent = resume_of(run)
    # Shaped as LegacyLangGraph shapes it: several answers by LangGraph's own ids.
    assert sent["forwardedProps"]["command"]["resume"].keys() == set(lg_ids)
    resume = Run.objects.select_related("agent").get(parent=run)
    answered_as = dialects.for_agent(resume.agent.dialect, resume.agent.paused_as)
    assert "resume" not in answered_as.outgoing(sent)


def test_adk_s_confirmation_shows_and_attests_the_call_it_asks_about():
    run = recorded(make.agent(), captured("adk_confirmation.jsonl"))
    [asked] = Interrupt.objects.filter(run=run)
    wrapper = asked.raw["toolCallId"]
    assert (asked.tool_name, asked.proposed_args) == ("issue_refund", {"order": "A-1001", "amount": 42})
    # The wrapper stays in the raw record and is what the resume answers.
    assert asked.tool_call_id == wrapper
    assert asked.raw["metadata"]["adk"]["originalFunctionCall"]["name"] == "issue_refund"
    assert not [p for p in asked.problems if p["code"] == "DOUBTFUL_PROPOSAL"]  # the stream's call agrees
    assert Agent.objects.get(pk=run.agent_id).paused_as == "adk"
    decisions.decide(asked, make.user(), "resolved", {"approved": True})
    [entry] = resume_of(run)["resume"]
    attested = entry["metadata"][signing.METADATA_KEY]
    assert entry["interruptId"] == asked.interrupt_id and entry["payload"] == {"approved": True}
    assert (attested["toolCallId"], attested["toolName"], attested["args"]) == (
        wrapper, "issue_refund", {"order": "A-1001", "amount": 42})


def test_an_adk_confirmation_contradicting_the_stream_s_own_call_is_flagged():
    events = captured("adk_confirmation.jsonl")
    original = events[-1]["outcome"]["interrupts"][0]["metadata"]["adk"]["originalFunctionCall"]["id"]
    for event in events:
        if event["type"] == "TOOL_CALL_ARGS" and event["toolCallId"] == original:
            event["delta"] = json.dumps({"order": "A-1001", "amount": 4200})
    run = recorded(make.agent(), events)
    [asked] = Interrupt.objects.filter(run=run)
    assert asked.proposed_args == {"order": "A-1001", "amount": 42}
    [doubt] = [p for p in asked.problems if p["code"] == "DOUBTFUL_PROPOSAL"]
    assert "issue_refund" in doubt["message"]


@pytest.mark.parametrize("name, tool, args", [
    ("crewai_feedback_tool.jsonl", "issue_refund", {"order": "A-1001", "amount": 42}),
    ("crewai_feedback_draft.jsonl", "", "Dear customer, your refund of 42 EUR on order A-1001 is on its way."),
])
def test_crewai_s_feedback_shows_its_proposal_and_the_outcome_wins_over_its_on_interrupt(name, tool, args):
    events = captured(name)
    run = recorded(make.agent(), events)
    [asked] = Interrupt.objects.filter(run=run)
    # The outcome's interrupt (CrewAI's own id: its flow's), not one read from its legacy on_interrupt.
    assert asked.interrupt_id == events[-1]["outcome"]["interrupts"][0]["id"]
    assert METADATA_KEY not in (asked.metadata or {})
    assert (asked.tool_call_id, asked.tool_name, asked.proposed_args) == ("", tool, args)
    assert Agent.objects.get(pk=run.agent_id).paused_as == "crewai"
    decisions.decide(asked, make.user(), "resolved", {"approved": True})  # what Approve sends without a schema
    [entry] = resume_of(run)["resume"]
    attested = entry["metadata"][signing.METADATA_KEY]
    assert entry["interruptId"] == asked.interrupt_id
    if tool:
        assert (attested["toolCallId"], attested["toolName"], attested["args"]) == (None, tool, args)
    else:
        assert "toolName" not in attested


def test_the_card_shows_the_real_action_and_the_proposal(client):
    adk = recorded(make.agent(), captured("adk_confirmation.jsonl"))
    crewai = recorded(make.agent(), captured("crewai_feedback_draft.jsonl"))
    client.force_login(make.user())
    for run, shown, hidden in [
            (adk, "Proposed call <code>issue_refund</code>", "<code>adk_request_confirmation</code>"),
            (crewai, '<h3 class="proposal-head">Proposal</h3>', "(unknown tool)")]:
        page = client.get(reverse("inbox") + f"?agent={run.agent.name}").content.decode()
        assert shown in page and hidden not in page, page
    assert "your refund of 42 EUR" in page


def test_crewai_served_with_its_defaults_reaches_the_inbox_with_its_proposal():
    """Only the legacy on_interrupt, no outcome: detected, raised, shown as CrewAI's proposal, resumed by resume[]."""
    run = recorded(make.agent(), captured("crewai_feedback_default.jsonl"))
    assert run.status == Run.Status.INTERRUPTED
    [asked] = Interrupt.objects.filter(run=run)
    assert asked.interrupt_id == interrupt_id(run.run_id, 0)
    assert (asked.tool_name, asked.proposed_args) == ("issue_refund", {"order": "A-1001", "amount": 42})
    assert Agent.objects.get(pk=run.agent_id).paused_as == "crewai"
    decisions.decide(asked, make.user(), "resolved", {"approved": True})
    sent = resume_of(run)
    # One entry: CrewAI resumes its thread's pending feedback whatever the id.
    assert [e["interruptId"] for e in sent["resume"]] == [asked.interrupt_id]
    assert sent["resume"][0]["metadata"][signing.METADATA_KEY]["toolName"] == "issue_refund"
