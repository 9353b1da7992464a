"""Interrupts asked by a subagent (AG-UI 1.0, C35-C42, P14), streamed from a real agent, named in plain words.

The scripted agent announces two subagents (SUBAGENT_STARTED, with their
names), each suspends on an interrupt (SUBAGENT_FINISHED, outcome
``suspended``): one tagged with its ``subagentRunId``, one listed only in its
subagent's ``interruptIds``. The card, the thread page and the audit page say
"asked by the subagent <name>", never the run id alone.
"""

import asyncio
import re

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.urls import reverse

from interrupts.hub import decisions, outbox, runs, streaming
from interrupts.models import Interrupt, Run

from .. import factories as make
from ..e2e.scripted_agent import ScriptedAgent, finished, started
from ..loopback import frame, stream

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = "test-worker"
EVIL = "<b>writer</b>"


class Agent(ScriptedAgent):
    def answer(self, handler, name, body) -> None:
        if name != "subagents":
            return super().answer(handler, name, body)
        return stream(handler, [
            frame(started(body)),
            frame({"type": "SUBAGENT_STARTED", "subagentRunId": "sub-r1", "name": "researcher"}),
            frame({"type": "SUBAGENT_STARTED", "subagentRunId": "sub-w1", "name": EVIL}),
            frame({"type": "TEXT_MESSAGE_START", "messageId": "m-1", "role": "assistant", "subagentRunId": "sub-r1"}),
            frame({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m-1", "delta": "Found three sources."}),
            frame({"type": "TEXT_MESSAGE_END", "messageId": "m-1"}),
            frame({"type": "SUBAGENT_FINISHED", "subagentRunId": "sub-r1",
                   "outcome": {"type": "suspended", "interruptIds": ["ask-1"]}}),
            frame({"type": "SUBAGENT_FINISHED", "subagentRunId": "sub-w1",
                   "outcome": {"type": "suspended", "interruptIds": ["ask-2"]}}),
            frame(finished(body, {"type": "interrupt", "interrupts": [
                {"id": "ask-1", "reason": "confirmation", "message": "Cite the paywalled source?",
                 "subagentRunId": "sub-r1"},
                {"id": "ask-2", "reason": "confirmation", "message": "Publish the draft?"},
                {"id": "ask-3", "reason": "confirmation", "message": "Send the summary?"},
            ]})),
        ])


@pytest.fixture(scope="module")
def agent():
    served = Agent().start()
    yield served
    served.stop()


@pytest.fixture
async def closed_after():
    yield
    await sync_to_async(connections.close_all)()


def streamed(url: str) -> Run:
    run = runs.start_run(make.agent(url=url, name="Planner"), user=make.user(), message="go")
    assert [pk for pk, _ in outbox.claim_due(1, WORKER)] == [run.pk]
    return run


def cards(page: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in re.finditer(r'<article[^>]*data-interrupt-id="([^"]+)".*?</article>',
                                                         page, re.S)}


async def test_c35_c36_p14_an_interrupt_asked_by_a_subagent_is_named_on_card_thread_and_audit(
        agent, closed_after, client):
    run = await sync_to_async(streamed)(f"{agent.url}/subagents/")
    await asyncio.wait_for(streaming.stream_run(run.pk, WORKER), 20)
    run = await Run.objects.select_related("thread").aget(pk=run.pk)
    assert run.status == "interrupted"
    reviewer = await sync_to_async(make.user)(is_staff=True)
    await sync_to_async(client.force_login)(reviewer)
    make.every_card_whole(client)

    inbox = cards((await sync_to_async(client.get)(reverse("inbox"), {"scope": "all"})).content.decode())
    assert 'asked by the subagent <strong title="subagent run sub-r1">researcher</strong>' in inbox["ask-1"]
    # Attributed by its subagent's suspended outcome (C36), named escaped.
    assert 'asked by the subagent <strong title="subagent run sub-w1">&lt;b&gt;writer&lt;/b&gt;</strong>' \
        in inbox["ask-2"]
    assert EVIL not in inbox["ask-2"]
    assert 'data-testid="subagent"' not in inbox["ask-3"]  # the agent itself asked

    thread = (await sync_to_async(client.get)(reverse("thread", args=[run.thread.thread_id]))).content.decode()
    [end] = re.findall(r'<div class="run-end.*?</div>', thread, re.S)
    assert '<code>ask-1</code> <span data-testid="subagent">(asked by the subagent <strong title="subagent run ' \
           'sub-r1">researcher</strong>)</span>' in end
    assert "&lt;b&gt;writer&lt;/b&gt;</strong>)</span>" in end and EVIL not in thread

    for interrupt in await sync_to_async(list)(Interrupt.objects.filter(run=run).select_related("run")):
        await sync_to_async(decisions.decide)(interrupt, reviewer, "resolved", {"approved": True})
    audit = (await sync_to_async(client.get)(reverse("audit"))).content.decode()
    assert audit.count('data-testid="audit-row"') == 3
    assert 'data-testid="audit-subagent">asked by the subagent <strong title="subagent run sub-r1">researcher' \
           '</strong></span>' in audit
    assert audit.count('data-testid="audit-subagent"') == 2 and EVIL not in audit
