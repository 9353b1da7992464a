"""What reaches the agent is what was acknowledged (issue 24 item 4).

A decide request commits its decision, then sends its answer. A process killed
between the two (kill -9 in the load test) left a decision nobody was told was
taken, and the batch's resume carried it to the agent: 2 of 100 interrupts in
tests/e2e/stress_mismatch.py, 1 of 60 threads in the issue's load test. Now a
decision taken for a reply still to be sent (``unsent``) travels only once
``acknowledge`` says the reply left; one never acknowledged is taken back by
``drop_unacknowledged``. In process, on SQLite and PostgreSQL alike.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from interrupts.hub import decisions, outbox
from interrupts.models import AuditEntry, Decision, Interrupt, Run

from .. import factories as make

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
APPROVE, REJECT = {"approved": True}, {"approved": False}


@pytest.fixture(autouse=True)
def no_undo_window(settings):
    settings.COUNTERSIGN_UNDO_SECONDS = 0  # as in the load test: a resume leaves as soon as it may


def batch(size: int) -> list[Interrupt]:
    run = make.run(make.thread(), status="interrupted")
    return [make.interrupt(run, interrupt_id=f"int-{n}", raw={"id": f"int-{n}", "reason": "confirmation",
                                                               "responseSchema": SCHEMA}, response_schema=SCHEMA)
            for n in range(size)]


def resumes(interrupt) -> list[Run]:
    return list(Run.objects.filter(parent=interrupt.run_id, resume_key__isnull=False))


def later():
    """The sweep's clock once the grace has passed: the process that decided is gone."""
    return timezone.now() + timedelta(seconds=61)


def test_a_closing_decision_whose_answer_never_left_is_not_sent_but_taken_back():
    [interrupt] = batch(1)
    decision = decisions.decide(interrupt, make.user(), "resolved", REJECT, unsent=True)
    [resume] = resumes(interrupt)
    assert outbox.claim_due(10, "w") == []  # held: its reviewer has not been told yet

    assert decisions.drop_unacknowledged(later()) == 1  # the process died before replying

    assert resumes(interrupt) == []  # withdrawn: the agent never hears of it
    interrupt.refresh_from_db()
    assert interrupt.status == "pending" and interrupt.unacknowledged_id is None
    assert Decision.objects.get(pk=decision.pk).superseded_at is not None
    assert AuditEntry.objects.filter(kind=decisions.UNACKNOWLEDGED, subject=f"decision:{decision.pk}").exists()
    assert not Run.objects.filter(pk=resume.pk).exists()


def test_an_acknowledged_decision_goes_at_once_and_the_sweep_leaves_it():
    [interrupt] = batch(1)
    decision = decisions.decide(interrupt, make.user(), "resolved", APPROVE, unsent=True)
    [resume] = resumes(interrupt)
    decisions.acknowledge([decision])  # the reply left
    assert outbox.claim_due(10, "w") == [(resume.pk, True)]
    assert decisions.drop_unacknowledged(later()) == 0
    assert Interrupt.objects.get(pk=interrupt.pk).status == "resolved"


def test_an_earlier_unacknowledged_decision_holds_the_batch_another_one_completes():
    # The load test's other case: the decision lost with its process was not the batch's last.
    first, second = batch(2)
    lost = decisions.decide(first, make.user(), "resolved", APPROVE, unsent=True)
    closing = decisions.decide(second, make.user(), "resolved", REJECT, unsent=True)
    decisions.acknowledge([closing])
    [resume] = resumes(second)
    assert outbox.claim_due(10, "w") == []  # the first answer was never acknowledged

    assert decisions.drop_unacknowledged(later()) == 1
    assert resumes(second) == []
    assert Interrupt.objects.get(pk=first.pk).status == "pending"
    assert Interrupt.objects.get(pk=second.pk).status == "resolved"  # acknowledged: it stands
    assert Decision.objects.get(pk=lost.pk).superseded_at is not None

    # Decided again, and this time told: the resume carries exactly the acknowledged answers.
    again = decisions.decide(first, make.user(), "resolved", REJECT, unsent=True)
    decisions.acknowledge([again])
    [resume] = resumes(second)
    assert outbox.claim_due(10, "w") == [(resume.pk, True)]
    assert {e["interruptId"]: e["payload"] for e in resume.input["resume"]} == {"int-0": REJECT, "int-1": REJECT}


def test_the_grace_is_not_cut_short():
    [interrupt] = batch(1)
    decisions.decide(interrupt, make.user(), "resolved", APPROVE, unsent=True)
    assert decisions.drop_unacknowledged(timezone.now()) == 0  # its reply may still be on its way
    assert len(resumes(interrupt)) == 1


def test_a_decision_made_where_the_caller_itself_is_the_reply_is_not_held():
    [interrupt] = batch(1)
    decisions.decide(interrupt, make.user(), "resolved", APPROVE)  # a command, the test client: no reply to wait for
    [resume] = resumes(interrupt)
    assert outbox.claim_due(10, "w") == [(resume.pk, True)]
