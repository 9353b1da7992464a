"""AG-UI 1.0's rules where they touch the database: frontend tool calls (C21-C24), coverage (C14, C15),
protocolVersion (C64-C67), with a real HTTP agent streamed in process. Named after the checklist's rules."""

from __future__ import annotations

import asyncio

import pytest
from ag_ui.core import RunAgentInput
from asgiref.sync import sync_to_async
from django.urls import reverse

from interrupts.api.serializers import RunSerializer
from interrupts.hub import accept, outbox, runs, streaming
from interrupts.hub.refusals import Refusal
from interrupts.models import Agent, Run, Thread
from interrupts.protocol.errors import ContractViolation
from interrupts.reads import history

from .. import factories as make
from ..e2e.scripted_agent import ScriptedAgent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("closed_after")]

WORKER = "test-worker"


@pytest.fixture(scope="module")
def agent():
    served = ScriptedAgent().start()
    yield served
    served.stop()


@pytest.fixture(autouse=True)
def quick(settings):
    settings.COUNTERSIGN_AFTER_TERMINAL_GRACE = 0.3
    settings.COUNTERSIGN_IDLE_TIMEOUT = 2.0


def _start(url: str, thread_id: str | None = None, agent_row: Agent | None = None) -> Run:
    row = agent_row or make.agent(url=url)
    run = runs.start_run(row, user=make.user(), message="When?", thread_id=thread_id)
    assert outbox.claim_due(1, WORKER) == [(run.pk, False)]
    return run


async def _streamed(url: str, **kw) -> Run:
    run = await sync_to_async(_start)(url, **kw)
    await asyncio.wait_for(streaming.stream_run(run.pk, WORKER), 20)
    return await sync_to_async(Run.objects.select_related("thread", "agent").get)(pk=run.pk)


@pytest.mark.parametrize("path", ["frontend-tool", "frontend-tool-silent"])
async def test_c21_a_run_ending_on_a_call_for_its_client_is_waiting_not_succeeded(agent, path):
    # With pendingToolCallIds, and without it (LlamaIndex): the list comes from the stream.
    run = await _streamed(f"{agent.url}/{path}/")
    assert run.status == "succeeded" and run.pending_tool_calls == [{"id": "tc-front", "name": "pick_date"}]
    assert run.shown_status == "waiting_on_client"
    words = await sync_to_async(lambda: [r.words for r in history.runs(run.thread)])()
    assert words == ["waiting on a tool the client runs: pick_date"]
    shown = await sync_to_async(lambda: RunSerializer(run).data)()
    assert shown["status"] == "waiting_on_client" and shown["waiting_on"] == words[0]
    assert shown["pending_tool_calls"] == [{"id": "tc-front", "name": "pick_date"}]


async def test_c21_a_run_whose_calls_were_answered_just_succeeded(agent):
    run = await _streamed(f"{agent.url}/approve/")  # interrupted: its call is the reviewers'
    assert run.status == "interrupted" and run.pending_tool_calls is None


async def test_c24_countersign_will_not_continue_such_a_thread_but_a_new_thread_goes_on(agent):
    run = await _streamed(f"{agent.url}/frontend-tool/")
    with pytest.raises(Refusal) as refused:
        await sync_to_async(runs.start_run)(run.agent, thread_id=run.thread.thread_id, message="and?")
    assert refused.value.code == "UNANSWERED_TOOL_CALLS"
    assert "pick_date" in refused.value.message and "new thread" in refused.value.message
    assert await Run.objects.filter(thread=run.thread).acount() == 1
    fresh = await sync_to_async(runs.start_run)(run.agent, message="again")
    assert fresh.thread_id != run.thread_id


def _gateway_input(thread: Thread, run_id: str, answer: bool) -> RunAgentInput:
    messages = list(thread.messages)
    if answer:
        messages.append({"id": "t-1", "role": "tool", "toolCallId": "tc-front", "content": "5 May"})
    return RunAgentInput.model_validate({"threadId": thread.thread_id, "runId": run_id, "state": {},
                                         "messages": messages, "tools": [], "context": [], "forwardedProps": {}})


async def test_c23_the_next_input_through_the_gateway_must_answer_each_call(agent):
    run = await _streamed(f"{agent.url}/frontend-tool/")
    thread = await Thread.objects.aget(pk=run.thread_id)
    user = await sync_to_async(make.user)()
    with pytest.raises(ContractViolation) as refused:
        await sync_to_async(accept.accept_input)(run.agent, _gateway_input(thread, "r-2", False), user, WORKER)
    assert refused.value.code == "UNANSWERED_TOOL_CALLS" and refused.value.details["tool_call_ids"] == ["tc-front"]
    accepted = await sync_to_async(accept.accept_input)(run.agent, _gateway_input(thread, "r-3", True), user, WORKER)
    assert accepted.verdict.kind == "new" and accepted.run.input["messages"][-1]["toolCallId"] == "tc-front"


async def test_c22_an_interrupted_run_shows_its_client_calls_and_its_resume_is_not_held_by_them():
    def check():
        run = make.run(status="interrupted", pending_tool_calls=[{"id": "tc-2", "name": "confirm_changes"}])
        make.interrupt(run, interrupt_id="int-1")
        [listed] = history.runs(run.thread)
        assert listed.words == "paused for 1 decision; waiting on a tool the client runs: confirm_changes"
        # The resume answers the interrupt alone: the gate asks nothing of the client's calls then.
        assert runs.thread_gate(run.thread).pending_tool_calls == ()
    await sync_to_async(check)()


async def test_c14_c15_countersign_sends_no_resume_that_leaves_an_interrupt_out():
    def check():
        run = make.run(status="interrupted")
        first = make.interrupt(run, interrupt_id="int-1", status="resolved")
        make.interrupt(run, interrupt_id="int-2", status="resolved")
        make.decision(first, make.user())
        with pytest.raises(ContractViolation) as refused:
            runs.queue_resume(run)
        assert refused.value.code == "INCOMPLETE_RESUME" and refused.value.details["interrupt_ids"] == ["int-2"]
        assert not Run.objects.filter(parent=run).exists()
    await sync_to_async(check)()


async def test_c64_c65_every_input_declares_1_0_and_the_agent_s_own_declaration_is_kept(agent):
    run = await _streamed(f"{agent.url}/frontend-tool/")
    [body] = [body for _path, body in agent.bodies if body["runId"] == run.run_id]
    assert body["protocolVersion"] == "1.0" and "protocolVersion" not in run.input  # declared as sent
    assert (await Agent.objects.aget(pk=run.agent_id)).protocol_version == "1.0"
    # An agent that declares nothing is a peer from before versioning: kept as "", and still sent 1.0.
    legacy = await _streamed(f"{agent.url}/legacy/")
    assert (await Agent.objects.aget(pk=legacy.agent_id)).protocol_version == ""
    assert [b for _p, b in agent.bodies if b["runId"] == legacy.run_id][0]["protocolVersion"] == "1.0"
    assert legacy.status == "succeeded" and legacy.notice == ""


async def test_c67_a_newer_agent_is_served_and_warned_about(agent):
    run = await _streamed(f"{agent.url}/newer-version/")
    assert run.status == "succeeded" and "1.10" in run.notice and "newer" in run.notice
    assert (await Agent.objects.aget(pk=run.agent_id)).protocol_version == "1.10"


async def test_c24_the_thread_page_says_what_the_run_waits_on_and_start_run_says_why_not(agent, client):
    run = await _streamed(f"{agent.url}/frontend-tool/")

    def check():
        client.force_login(make.user())
        page = client.get(reverse("thread", args=[run.thread.thread_id]))
        assert "waiting on a tool the client runs: pick_date" in page.content.decode()
        refused = client.post(reverse("start-run", args=[run.thread.thread_id]), {"message": "and?"}, follow=True)
        assert "Countersign cannot run that tool" in refused.content.decode()
        assert Run.objects.filter(thread=run.thread).count() == 1
    await sync_to_async(check)()


async def test_c17_what_a_client_adds_beyond_ag_ui_is_not_sent_and_the_run_says_so(agent):
    def accepted():
        row = make.agent(url=f"{agent.url}/legacy/")
        body = {"threadId": "t-c17", "runId": "r-1", "messages": [], "state": {}, "tools": [], "context": [],
                "forwardedProps": {}, "clientOnly": {"secret": 1}}
        return accept.accept_input(row, RunAgentInput.model_validate(body), make.user(), WORKER).run
    run = await sync_to_async(accepted)()
    await asyncio.wait_for(streaming.stream_run(run.pk, WORKER), 20)
    [body] = [body for _path, body in agent.bodies if body["runId"] == "r-1" and body["threadId"] == "t-c17"]
    assert "clientOnly" not in body and body["protocolVersion"] == "1.0"
    ended = await Run.objects.aget(pk=run.pk)
    assert ended.status == "succeeded" and "clientOnly" in ended.notice


async def test_c16_the_resume_continues_the_thread_with_its_messages_and_state():
    def check():
        thread = make.thread()
        Thread.objects.filter(pk=thread.pk).update(
            messages=[{"id": "u-1", "role": "user", "content": "Delete it"}], state={"step": 2})
        run = make.run(Thread.objects.get(pk=thread.pk), status="interrupted")
        asked = make.interrupt(run, interrupt_id="int-1", status="resolved")
        make.decision(asked, make.user(), payload={"ok": True})
        sent = runs.queue_resume(run).input
        assert (sent["threadId"], sent["parentRunId"]) == (thread.thread_id, run.run_id)
        assert sent["messages"] == [{"id": "u-1", "role": "user", "content": "Delete it"}]
        assert sent["state"] == {"step": 2}
        assert [(e["interruptId"], e["status"], e["payload"]) for e in sent["resume"]] == [("int-1", "resolved",
                                                                                           {"ok": True})]
    await sync_to_async(check)()
