"""The outbox's delivery record and how recovery reads it (README, "The outbox's contract").

In process, on the test database: a lapsed run is made as a dead process
would leave it, and ``streaming.recover`` settles it. The crash tests
(tests/e2e/test_crash.py) kill real servers at each point instead.
"""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from interrupts.hub import events, outbox, streaming
from interrupts.live import relay
from interrupts.models import AuditEntry, Event, Run
from interrupts.protocol import capabilities

from .. import factories as make

pytestmark = pytest.mark.django_db

WORKER = "recovering-process"


def lapsed_run(**fields) -> Run:
    """A run a dead process was streaming, already taken over by ``WORKER`` (``outbox.take_over``)."""
    fields.setdefault("resume_key", f"key-{timezone.now().timestamp()}")
    run = make.run(status="streaming", claimed_by="dead-process", lease_until=timezone.now() - timedelta(seconds=1),
                   **fields)
    assert outbox.take_over(run, WORKER)
    return Run.objects.select_related("thread", "agent").get(pk=run.pk)


def notes(run: Run) -> list[dict]:
    return [e.payload["value"] for e in Event.objects.filter(run=run, from_agent=False).order_by("seq")
            if e.payload.get("name") == relay.Note.SENT_AGAIN]


def started(run: Run) -> dict:
    return {"type": "RUN_STARTED", "threadId": run.thread.thread_id, "runId": run.run_id}


def finished(run: Run) -> dict:
    return {"type": "RUN_FINISHED", "threadId": run.thread.thread_id, "runId": run.run_id,
            "outcome": {"type": "success"}}


def test_a_run_never_sent_is_queued_again_with_its_run_id_and_input_and_the_log_says_so():
    run = lapsed_run()
    sent_input = dict(run.input)
    streaming.recover(run, WORKER)
    again = Run.objects.get(pk=run.pk)
    assert (again.status, again.claimed_by, again.sent_at, again.losses) == ("queued", "", None, 1)
    assert again.run_id == run.run_id and again.input == sent_input
    [note] = notes(run)
    assert note["sent"] is False and "stopped before the request left" in note["message"]
    # Due at once: the next claim takes it.
    assert (run.pk, True) in outbox.claim_due(10, "next-process")


def test_a_run_sent_to_an_agent_that_dedupes_is_queued_again():
    agent = make.agent(capabilities={"custom": {capabilities.DEDUPES_RUN_ID: True}})
    run = lapsed_run(thread_obj=make.thread(agent=agent), sent_at=timezone.now())
    events.append_many(run, [started(run)])  # a partial answer
    streaming.recover(run, WORKER)
    again = Run.objects.get(pk=run.pk)
    assert (again.status, again.error_code) == ("queued", "")
    [note] = notes(run)
    assert note["sent"] is True and "acts on only once" in note["message"]


@pytest.mark.parametrize("declared", [{}, {"custom": {capabilities.DEDUPES_RUN_ID: "yes"}},
                                      {"transport": {capabilities.DEDUPES_RUN_ID: True}}])
def test_a_run_sent_to_any_other_agent_goes_to_a_person_who_is_told_it_may_have_acted(declared):
    agent = make.agent(capabilities=declared)
    run = lapsed_run(thread_obj=make.thread(agent=agent), sent_at=timezone.now())
    streaming.recover(run, WORKER)
    lost = Run.objects.get(pk=run.pk)
    assert (lost.status, lost.error_code) == ("failed", "WORKER_LOST")
    assert "may have acted" in lost.error_message and "may have acted" in lost.refusal_text
    assert notes(run) == []


def test_a_run_whose_terminal_event_was_recorded_ends_as_it_said_even_unsent_by_the_record():
    run = lapsed_run(sent_at=timezone.now())
    events.append_many(run, [started(run), finished(run)])
    streaming.recover(run, WORKER)
    assert Run.objects.get(pk=run.pk).status == "succeeded"


def test_after_a_re_send_only_the_new_answer_counts():
    agent = make.agent(capabilities={"custom": {capabilities.DEDUPES_RUN_ID: True}})
    run = lapsed_run(thread_obj=make.thread(agent=agent), sent_at=timezone.now())
    events.append_many(run, [started(run), {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}])
    streaming.recover(run, WORKER)  # sent again; the SDK replays the whole run
    assert outbox.claim_due(10, WORKER) == [(run.pk, True)]
    assert outbox.mark_sent(run, WORKER, b"{}", "t=1,v1=00")
    events.append_many(run, [started(run), finished(run)])
    run = Run.objects.select_related("thread", "agent").get(pk=run.pk)
    run.claimed_by, run.lease_until = WORKER, timezone.now() - timedelta(seconds=1)
    Run.objects.filter(pk=run.pk).update(lease_until=run.lease_until)
    streaming.recover(run, WORKER)  # died again after recording the ending
    assert Run.objects.get(pk=run.pk).status == "succeeded"


def test_a_run_that_keeps_taking_its_process_down_is_given_up(settings):
    settings.COUNTERSIGN_RETRY_ATTEMPTS = 3
    run = lapsed_run(losses=2)
    streaming.recover(run, WORKER)
    lost = Run.objects.get(pk=run.pk)
    assert (lost.status, lost.error_code) == ("failed", "WORKER_LOST")
    assert "stopped 3 times" in lost.error_message


def test_a_gateway_run_is_never_queued_again_its_client_decides():
    run = lapsed_run(origin=Run.Origin.GATEWAY, resume_key=None)
    streaming.recover(run, WORKER)
    lost = Run.objects.get(pk=run.pk)
    assert (lost.status, lost.error_code) == ("failed", "WORKER_LOST")
    assert "client" in lost.error_message


def test_the_send_mark_needs_the_claim_and_a_deferral_clears_it():
    run = lapsed_run()
    assert not outbox.mark_sent(run, "dead-process", b"{}", "t=1,v1=00")
    assert not AuditEntry.objects.filter(kind=outbox.RESUME_SENT).exists()  # nothing left: nothing recorded
    assert outbox.mark_sent(run, WORKER, b"{}", "t=1,v1=00")
    assert Run.objects.get(pk=run.pk).sent_at is not None
    run.claimed_by = WORKER
    assert outbox.defer(Run.objects.get(pk=run.pk), WORKER, "CONNECT_ERROR", "refused") == 1
    assert Run.objects.get(pk=run.pk).sent_at is None


def test_only_an_explicit_true_in_custom_declares_dedupe():
    assert capabilities.dedupes_run_id({"custom": {"dedupesRunId": True}})
    for declared in (None, [], {"custom": None}, {"custom": {"dedupesRunId": 1}}, {"custom": {}}):
        assert not capabilities.dedupes_run_id(declared)


def test_a_recorded_answer_proves_the_run_left_even_without_the_mark():
    # A run claimed before the delivery record existed: its events say it reached the agent.
    run = lapsed_run()
    events.append_many(run, [started(run)])
    streaming.recover(run, WORKER)
    lost = Run.objects.get(pk=run.pk)
    assert (lost.status, lost.error_code) == ("failed", "WORKER_LOST")


def test_an_operator_declares_dedupe_with_the_agent_form_s_delivery_box():
    from interrupts.web.forms import AgentForm

    form = AgentForm(data={"name": "deduper", "url": "http://127.0.0.1:9/agent/", "cap_custom": ["dedupesRunId"],
                           "capabilities": '{"custom": {"region": "eu"}}'})
    assert form.is_valid(), form.errors
    agent = form.save()
    assert agent.capabilities["custom"] == {"region": "eu", "dedupesRunId": True}
    assert capabilities.dedupes_run_id(agent.capabilities)
    assert AgentForm(instance=agent).initial["cap_custom"] == ["dedupesRunId"]


def test_a_resume_s_exact_signed_bytes_go_into_the_trail_once_per_send():
    run = lapsed_run()
    assert run.resume_key
    body = '{"threadId":"t","messages":[{"content":"café ☕"}]}'.encode()
    assert outbox.mark_sent(run, WORKER, body, "t=10,v1=aa")
    assert outbox.mark_sent_again(run, WORKER, body, "t=10,v1=aa")  # the same send, its commit's answer lost
    assert outbox.mark_sent(run, WORKER, body, "t=99,v1=bb")  # sent again (taken over): signed anew
    sent = [json.loads(e.content)["data"] for e in AuditEntry.objects.filter(kind=outbox.RESUME_SENT).order_by("seq")]
    assert [(d["body"].encode(), d["signature"], d["runId"]) for d in sent] == [
        (body, "t=10,v1=aa", run.run_id), (body, "t=99,v1=bb", run.run_id)]
    assert {d["agent"] for d in sent} == {run.agent.name}

