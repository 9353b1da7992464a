"""An expired interrupt is still answered, with ``cancelled`` (AG-UI 1.0 C19, C20, C14; ``decisions.expire_due``).

Expired, it can no longer be resolved, but the batch's resume must cover it:
queued by the sweep when nothing else of the batch is open, by the last
decision otherwise; once, whoever comes first.
"""

import asyncio
import re
import threading
from datetime import timedelta

import pytest
from ag_ui.core import RunAgentInput
from asgiref.sync import sync_to_async
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from interrupts.hub import accept, decisions, events, outbox, outcomes, runs, streaming
from interrupts.hub.refusals import Refusal
from interrupts.hub.trail import verify
from interrupts.models import Interrupt, Run
from interrupts.protocol.errors import ProtocolError

from .. import factories as make
from ..e2e.scripted_agent import ScriptedAgent, finished, started
from ..loopback import frame, stream

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = "test-worker"
SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


def soon() -> str:
    return (timezone.now() + timedelta(hours=1)).isoformat().replace("+00:00", "Z")


def raised(*ids: str) -> Run:
    """An interrupted run with one interrupt per id, each due in an hour, recorded as the streamer records it."""
    run = make.run(status="streaming")
    body = {"threadId": run.thread.thread_id, "runId": run.run_id}
    terminal = finished(body, {"type": "interrupt", "interrupts": [
        {"id": iid, "reason": "confirmation", "message": f"Go on with {iid}?", "responseSchema": SCHEMA,
         "expiresAt": soon()} for iid in ids]})
    events.append_many(run, [started(body), terminal])
    outcomes.finish(run, terminal)
    return Run.objects.select_related("thread", "agent").get(pk=run.pk)


def lapse(run: Run, *ids: str) -> None:
    """Time passes for these interrupts: their expiresAt is now behind us."""
    Interrupt.objects.filter(run=run, interrupt_id__in=ids).update(expires_at=timezone.now() - timedelta(seconds=1))


def member(run: Run, iid: str) -> Interrupt:
    return Interrupt.objects.select_related("run").get(run=run, interrupt_id=iid)


def resumes(run: Run) -> list[Run]:
    return list(Run.objects.filter(parent=run, resume_key__isnull=False))


def answered(resume: Run) -> list[tuple[str, str]]:
    return [(e["interruptId"], e["status"]) for e in resume.input["resume"]]


def test_c20_an_expired_single_interrupt_is_answered_cancelled_as_expired_not_as_anyones_decision():
    run = raised("a")
    lapse(run, "a")
    assert decisions.expire_due() == 1
    [resume] = resumes(run)
    assert answered(resume) == [("a", "cancelled")] and resume.retry_at is None
    attested = resume.input["resume"][0]["metadata"]["countersign"]
    assert attested["expired"] is True and attested["reason"].startswith("expired at ")
    assert "decisions" not in attested and "payload" not in resume.input["resume"][0]
    assert decisions.expire_due() == 0 and len(resumes(run)) == 1
    assert verify.verify(save=False).ok


def test_c14_a_batch_of_two_with_one_expired_is_resumed_once_when_the_other_is_approved():
    run, reviewer = raised("a", "b"), make.user()
    lapse(run, "a")
    decisions.expire_due()
    assert member(run, "a").status == "expired" and member(run, "b").status == "pending"
    assert resumes(run) == []  # b still waits for people
    decisions.decide(member(run, "b"), reviewer, "resolved", {"approved": True})
    [resume] = resumes(run)
    assert answered(resume) == [("a", "cancelled"), ("b", "resolved")]
    a, b = resume.input["resume"]
    assert a["metadata"]["countersign"]["expired"] is True
    assert [d["username"] for d in b["metadata"]["countersign"]["decisions"]] == [reviewer.get_username()]
    assert b["payload"] == {"approved": True}


def test_c19_the_expired_one_is_refused_an_answer_and_the_batch_still_completes():
    run, reviewer = raised("a", "b"), make.user()
    lapse(run, "a")
    # Not swept yet: an answer is refused against the stored time, a cancel is taken as the reviewer's.
    with pytest.raises(Refusal) as refused:
        decisions.decide(member(run, "a"), reviewer, "resolved", {"approved": True})
    assert refused.value.code == "EXPIRED"
    decisions.decide(member(run, "a"), reviewer, "cancelled")
    assert decisions.expire_due() == 0
    decisions.decide(member(run, "b"), reviewer, "resolved", {"approved": False})
    [resume] = resumes(run)
    assert answered(resume) == [("a", "cancelled"), ("b", "resolved")]
    assert resume.input["resume"][0]["metadata"]["countersign"]["decisions"][0]["action"] == "cancel"


@pytest.mark.parametrize("round", range(3))
def test_c20_a_decision_racing_the_sweep_makes_one_resume_covering_both(round):
    """The last open interrupt decided while the sweep expires its sibling (threads with their own connections)."""
    run, reviewer = raised("a", "b"), make.user()
    lapse(run, "a")
    barrier, problems = threading.Barrier(2), []

    def race(call):
        barrier.wait()
        try:
            call()
        except Exception as problem:  # noqa: BLE001 - reported below, with the other thread's
            problems.append(problem)
        finally:
            connection.close()

    threads = [threading.Thread(target=race, args=(call,)) for call in (
        decisions.expire_due,
        lambda: decisions.decide(member(run, "b"), reviewer, "resolved", {"approved": True}))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert problems == []
    [resume] = resumes(run)
    assert answered(resume) == [("a", "cancelled"), ("b", "resolved")]
    assert decisions.expire_due() == 0 and len(resumes(run)) == 1


# --- sent to a real agent, once -----------------------------------------------------------------


class Agent(ScriptedAgent):
    """``expiring`` raises one interrupt due in an hour; its resume ends the run."""

    def answer(self, handler, name, body) -> None:
        if name == "expiring":
            self.calls[(name, body.get("threadId"))] += 1
            self.bodies.append((name, body))
            if body.get("resume"):
                return stream(handler, [frame(started(body)), frame(finished(body, {"type": "success"}))])
            return stream(handler, [frame(started(body)), frame(finished(body, {"type": "interrupt", "interrupts": [
                {"id": "a", "reason": "confirmation", "message": "Go on?", "expiresAt": soon()}]}))])
        super().answer(handler, name, body)


@pytest.fixture(scope="module")
def agent():
    served = Agent().start()
    yield served
    served.stop()


def claimed(run: Run) -> None:
    assert [pk for pk, _ in outbox.claim_due(1, WORKER)] == [run.pk]


async def test_c20_the_agent_receives_the_expired_interrupt_cancelled_once(agent, closed_after):
    registered = await sync_to_async(make.agent)(url=f"{agent.url}/expiring/")
    first = await sync_to_async(runs.start_run)(registered, message="go")
    await sync_to_async(claimed)(first)
    await asyncio.wait_for(streaming.stream_run(first.pk, WORKER), 20)
    first = await Run.objects.select_related("thread").aget(pk=first.pk)
    assert first.status == "interrupted"
    await sync_to_async(lapse)(first, "a")
    assert await sync_to_async(decisions.expire_due)() == 1
    [resume] = await sync_to_async(resumes)(first)
    await sync_to_async(claimed)(resume)
    await asyncio.wait_for(streaming.stream_run(resume.pk, WORKER), 20)
    assert await sync_to_async(decisions.expire_due)() == 0
    assert await sync_to_async(outbox.claim_due)(1, WORKER) == []
    sent = [body["resume"] for _, body in agent.bodies
            if body.get("threadId") == first.thread.thread_id and body.get("resume")]
    assert [[(e["interruptId"], e["status"]) for e in entries] for entries in sent] == [[("a", "cancelled")]]
    assert sent[0][0]["metadata"]["countersign"]["expired"] is True
    assert (await Run.objects.aget(pk=resume.pk)).status == "succeeded"


# --- the card -----------------------------------------------------------------------------------


def test_c19_a_card_past_its_expiry_offers_only_cancel_and_takes_it(client):
    run, reviewer = raised("a"), make.user(is_staff=True)
    client.force_login(reviewer)
    lapse(run, "a")  # not swept yet
    page = client.get(reverse("inbox"), {"scope": "all"}).content.decode()
    [card] = re.findall(r'<article[^>]*data-interrupt-id="a".*?</article>', page, re.S)
    assert 'data-testid="past-expiry"><strong>Expired</strong>: it can no longer be answered' in card
    assert re.findall(r'name="action" value="([a-z]+)"', card) == ["cancel"]
    assert "data-edit" not in card and 'name="payload"' not in card
    client.post(reverse("decide", args=[member(run, "a").pk]), {"action": "cancel"})
    [resume] = resumes(run)
    assert answered(resume) == [("a", "cancelled")]
    assert resume.input["resume"][0]["metadata"]["countersign"]["decisions"][0]["username"] == \
        reviewer.get_username()


# --- through the gateway ------------------------------------------------------------------------


def gateway_resume(run: Run, *entries: dict, run_id: str = "run-gw-resume") -> RunAgentInput:
    return RunAgentInput.model_validate({
        "threadId": run.thread.thread_id, "runId": run_id, "parentRunId": run.run_id, "state": {}, "messages": [],
        "tools": [], "context": [], "forwardedProps": {}, "resume": list(entries)})


CANCEL_A = {"interruptId": "a", "status": "cancelled"}
APPROVE_B = {"interruptId": "b", "status": "resolved", "payload": {"approved": True}}


def test_c19_c20_c14_a_gateway_client_covers_an_expired_interrupt_with_cancelled_and_only_so():
    run, client = raised("a", "b"), make.user()
    lapse(run, "a")
    decisions.expire_due()
    refusals = [
        (gateway_resume(run, APPROVE_B), "INCOMPLETE_RESUME"),  # a left uncovered (C14, C15)
        (gateway_resume(run, {**CANCEL_A, "status": "resolved", "payload": {"approved": True}}, APPROVE_B),
         "EXPIRED"),  # resolving it (C19)
    ]
    for run_input, expected in refusals:
        with pytest.raises(ProtocolError) as refused:
            accept.accept_input(run.agent, run_input, client, WORKER)
        assert refused.value.code == expected
    assert resumes(run) == [] and member(run, "b").status == "pending"
    accepted = accept.accept_input(run.agent, gateway_resume(run, CANCEL_A, APPROVE_B), client, WORKER)
    assert answered(accepted.run) == [("a", "cancelled"), ("b", "resolved")]
    a, b = accepted.run.input["resume"]
    assert a["metadata"]["countersign"]["expired"] is True and "decisions" not in a["metadata"]["countersign"]
    assert b["metadata"]["countersign"]["decisions"][0]["username"] == client.get_username()
    assert member(run, "a").status == "expired" and member(run, "b").status == "resolved"


def test_c20_a_gateway_client_s_cancel_after_the_sweep_sent_it_is_the_same_resume():
    # The sweep answered first; the client's own cover of the expired interrupt is that answer, not a second one.
    run, client = raised("a"), make.user()
    lapse(run, "a")
    decisions.expire_due()
    [swept] = resumes(run)
    accepted = accept.accept_input(run.agent, gateway_resume(run, CANCEL_A), client, WORKER)
    assert accepted.verdict.kind == "replay" and accepted.run == swept
    assert resumes(run) == [swept]
