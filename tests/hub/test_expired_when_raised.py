"""An interrupt raised with an ``expiresAt`` already past never waits (``outcomes.finish``, ``decisions.expire_due``).

It is expired at once with a reason that says so, on the card, in the API and
in the audit trail (an expiry entry each). 1.0 (C19, C20, C14): it can no
longer be answered, but it is still covered, with ``cancelled``, by the
batch's resume: at once when nothing else of the batch is open, otherwise
with the others' answers. A future expiresAt still waits.
"""

import asyncio
import json
import re
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse
from django.utils import timezone

from interrupts.hub import decisions, events, outbox, outcomes, runs, streaming
from interrupts.hub.refusals import Refusal
from interrupts.hub.trail import chain, verify
from interrupts.live import relay
from interrupts.models import AuditEntry, Event, Interrupt, Run
from interrupts.protocol.errors import ProtocolError

from .. import factories as make
from ..e2e.scripted_agent import ScriptedAgent, finished, started
from ..loopback import frame, stream

pytestmark = pytest.mark.django_db(transaction=True)

PAST = "2020-01-01T00:00:00Z"
WORKER = "test-worker"


def future() -> str:
    return (timezone.now() + timedelta(days=1)).isoformat().replace("+00:00", "Z")


def batch(*expiries) -> list[dict]:
    """One interrupt per expiry given (None: no expiresAt), ids a, b, c, ..."""
    items = []
    for n, expires in enumerate(expiries):
        item = {"id": "abcdefgh"[n], "reason": "confirmation", "message": f"Step {n}?"}
        if expires is not None:
            item["expiresAt"] = expires
        items.append(item)
    return items


def raised(items: list[dict]) -> Run:
    """A streaming run that ended raising ``items``, recorded as the streamer records it."""
    run = make.run(status="streaming")
    ids = {"threadId": run.thread.thread_id, "runId": run.run_id}
    terminal = {"type": "RUN_FINISHED", **ids, "outcome": {"type": "interrupt", "interrupts": items}}
    events.append_many(run, [{"type": "RUN_STARTED", **ids}, terminal])
    outcomes.finish(run, terminal)
    decisions.expire_due()  # what the supervisor, woken by finish, does at once
    return Run.objects.select_related("thread", "agent").get(pk=run.pk)


def closed(run: Run) -> dict[str, Interrupt]:
    return {i.interrupt_id: i for i in Interrupt.objects.filter(run=run)}


def expiry_entries(run: Run) -> dict[str, dict]:
    entries = AuditEntry.objects.filter(interrupt__run=run, kind=chain.EXPIRY).select_related("interrupt")
    return {e.interrupt.interrupt_id: json.loads(e.content)["data"] for e in entries}


# --- the hub ------------------------------------------------------------------------------


def resume_of(run: Run) -> Run:
    return Run.objects.get(parent=run, resume_key__isnull=False)


def test_c20_an_interrupt_past_its_expiry_when_raised_is_expired_at_once_and_the_rest_wait():
    run = raised(batch(PAST, None, future()))
    found = closed(run)
    assert {iid: i.status for iid, i in found.items()} == {"a": "expired", "b": "pending", "c": "pending"}
    assert found["a"].closed_reason.startswith(f"expiresAt {PAST} had already passed when the agent raised it (")
    assert found["a"].closed_at is not None
    # The run still ended as the agent said: it raised them. Nothing is sent while b and c wait.
    assert run.status == "interrupted"
    assert not Run.objects.filter(parent=run).exists()
    # The expiry is in the audit trail, as stored, and the chain verifies.
    entries = expiry_entries(run)
    assert set(entries) == {"a"}
    assert entries["a"]["closedReason"] == found["a"].closed_reason and entries["a"]["status"] == "expired"
    assert entries["a"]["expiresAt"].startswith("2020-01-01T00:00:00")
    assert not verify.verify(save=False).problems
    # The thread's log says so too: a note of Countersign's own after the agent's end.
    note = Event.objects.filter(run=run, type="CUSTOM").get()
    assert not note.from_agent and note.payload["name"] == relay.Note.INTERRUPTS_EXPIRED
    assert note.payload["value"] == {"runId": run.run_id, "whenRaised": True,
                                     "interrupts": [{"id": "a", "expiresAt": PAST}]}


def test_c20_c14_a_batch_all_past_expiry_is_resumed_at_once_with_cancelled_attested_as_expired():
    run = raised(batch(PAST))
    [interrupt] = closed(run).values()
    resume = resume_of(run)
    # Not held for an undo: nobody decided anything.
    assert resume.status == "queued" and resume.retry_at is None and resume.requested_by_id == run.requested_by_id
    [entry] = resume.input["resume"]
    assert (entry["interruptId"], entry["status"]) == ("a", "cancelled") and "payload" not in entry
    attested = entry["metadata"]["countersign"]
    assert attested["expired"] is True and "decisions" not in attested
    assert attested["reason"] == interrupt.closed_reason and attested["expiresAt"] == PAST
    # Sent once: the sweep again finds nothing, and the same batch never gets a second resume.
    assert decisions.expire_due() == 0
    assert Run.objects.filter(parent=run).count() == 1


def test_a_future_expiry_still_waits_and_blocks_new_input():
    run = raised(batch(future(), None))
    found = closed(run)
    assert {iid: i.status for iid, i in found.items()} == {"a": "pending", "b": "pending"}
    assert found["a"].closed_reason == "" and found["a"].closed_at is None
    assert not expiry_entries(run) and not Event.objects.filter(run=run, type="CUSTOM").exists()
    with pytest.raises(ProtocolError) as refused:
        runs.start_run(run.agent, thread_id=run.thread.thread_id, message="next")
    assert refused.value.code == "PENDING_INTERRUPTS"


def test_c18_an_unreadable_expiry_is_due_at_once_and_says_why():
    run = raised(batch("tomorrow"))
    [interrupt] = closed(run).values()
    assert interrupt.status == "expired"
    assert interrupt.closed_reason == "expiresAt 'tomorrow' is not an ISO-8601 timestamp"
    assert [p["code"] for p in interrupt.problems] == ["INVALID_EXPIRY"]
    assert set(expiry_entries(run)) == {"a"}
    assert [e["status"] for e in resume_of(run).input["resume"]] == ["cancelled"]


def test_c19_an_answer_to_it_is_refused_with_its_reason_and_the_rest_are_answered():
    run = raised(batch(PAST, None))
    late, sibling = closed(run)["a"], closed(run)["b"]
    for status, payload in (("resolved", {"approved": True}), ("cancelled", None)):
        with pytest.raises(Refusal) as refused:
            decisions.decide(late, make.user(), status, payload)
        assert refused.value.code == "EXPIRED"
        assert "had already passed when the agent raised it" in refused.value.message
    assert not Run.objects.filter(parent=run).exists()
    decisions.decide(sibling, make.user(), "resolved", {"approved": True})
    assert [(e["interruptId"], e["status"]) for e in resume_of(run).input["resume"]] == [
        ("a", "cancelled"), ("b", "resolved")]


# --- what people see ----------------------------------------------------------------------


@pytest.fixture
def reviewer(client):
    user = make.user(is_staff=True)
    client.force_login(user)
    return user


def test_c19_the_api_shows_it_expired_with_its_reason_and_refuses_an_answer(client, reviewer):
    run = raised(batch(PAST, None))
    found = closed(run)
    assert [r["interrupt_id"] for r in client.get("/api/interrupts/").json()["results"]] == ["b"]
    body = client.get(f"/api/interrupts/{found['a'].pk}/").json()
    assert (body["status"], body["closed_reason"]) == ("expired", found["a"].closed_reason)
    answer = client.post(f"/api/interrupts/{found['a'].pk}/decide/", {"action": "approve"},
                         content_type="application/json")
    assert answer.status_code == 409
    problem = answer.json()
    assert problem["code"] == "EXPIRED" and "already passed when the agent raised it" in problem["detail"]


def test_c19_the_card_says_it_expired_and_offers_nothing_to_answer_it(client, reviewer):
    run = raised(batch(PAST, None))
    inbox = client.get(reverse("inbox"), {"scope": "all"}).content.decode()
    assert 'data-testid="inbox-count">1<' in inbox
    [line] = re.findall(r'<div class="decided decided-line outcome-expired".*?</div>', inbox, re.S)
    assert 'data-interrupt-id="a"' in line and ">Expired</strong>: expiresAt" in line
    assert "is told it was cancelled" in line and "<button" not in line and "<form" not in line
    assert 'data-testid="batch-progress">1 of 2 decided<' in inbox
    # A card loaded before it expired: its answer comes back with the reason at the batch.
    answered = client.post(reverse("decide", args=[closed(run)["a"].pk]), {"action": "approve"},
                           HTTP_HX_REQUEST="true", HTTP_HX_TARGET=f"batch-{run.pk}").content.decode()
    [error] = re.findall(r'data-testid="card-error"><p>([^<]*)</p>', answered)
    assert error.startswith(f"Interrupt a expired: expiresAt {PAST} had already passed when the agent raised it")


def test_the_audit_page_and_thread_page_say_it_expired(client, reviewer):
    run = raised(batch(PAST))
    audit = client.get(reverse("audit"), {"outcome": "expired"}).content.decode()
    assert audit.count('data-testid="audit-row"') == 1
    assert f">Expired</strong>: expiresAt {PAST} had already passed when the agent raised it" in audit
    [row_a] = [r for r in json.loads(b"".join(client.get(reverse("audit"), {"format": "json"}).streaming_content))
               if r["interruptId"] == "a"]
    assert row_a["status"] == "expired" and [t["kind"] for t in row_a["trail"]] == [chain.EXPIRY]
    thread = client.get(reverse("thread", args=[run.thread.thread_id])).content.decode()
    assert relay.Note.INTERRUPTS_EXPIRED.value in thread


# --- through a real stream ------------------------------------------------------------------


class Agent(ScriptedAgent):
    """``late`` raises a batch whose first interrupt expired long ago; ``later`` one due tomorrow."""

    def answer(self, handler, name, body) -> None:
        if name in ("late", "later"):
            expiry = PAST if name == "late" else future()
            return stream(handler, [frame(started(body)), frame(finished(body, {
                "type": "interrupt", "interrupts": batch(expiry, None)}))])
        super().answer(handler, name, body)


@pytest.fixture(scope="module")
def agent():
    served = Agent().start()
    yield served
    served.stop()


def streamed_run(url: str) -> Run:
    run = runs.start_run(make.agent(url=url), user=make.user(), message="go")
    assert outbox.claim_due(1, WORKER) == [(run.pk, False)]
    return run


@pytest.mark.parametrize("path, statuses", [("late", {"a": "expired", "b": "pending"}),
                                            ("later", {"a": "pending", "b": "pending"})])
async def test_a_streamed_batch_is_expired_at_the_sweep_only_when_already_expired(agent, closed_after, path,
                                                                                  statuses):
    run = await sync_to_async(streamed_run)(f"{agent.url}/{path}/")
    await asyncio.wait_for(streaming.stream_run(run.pk, WORKER), 20)
    await sync_to_async(decisions.expire_due)()
    ended = await Run.objects.aget(pk=run.pk)
    assert ended.status == "interrupted"
    found = await sync_to_async(closed)(ended)
    assert {iid: i.status for iid, i in found.items()} == statuses
    entries = await sync_to_async(expiry_entries)(ended)
    assert set(entries) == ({"a"} if path == "late" else set())
