"""Each transition is one conditional update: it moves the status and the version together, or loses."""

import pytest
from django.utils import timezone

from interrupts.models import Decision, Interrupt, Run

from .. import factories as make

pytestmark = pytest.mark.django_db


def test_an_answer_read_at_a_stale_version_loses_and_moves_nothing():
    interrupt = make.interrupt()
    now = timezone.now()
    assert Interrupt.objects.filter(pk=interrupt.pk).answer(interrupt.version, "resolved", now) == 1
    assert Interrupt.objects.filter(pk=interrupt.pk).answer(interrupt.version, "cancelled", now) == 0
    stored = Interrupt.objects.get(pk=interrupt.pk)
    assert (stored.status, stored.version, stored.closed_at) == ("resolved", interrupt.version + 1, now)


def test_a_quorum_approval_moves_the_version_but_leaves_it_pending():
    interrupt = make.interrupt()
    assert Interrupt.objects.filter(pk=interrupt.pk).answer(interrupt.version) == 1
    stored = Interrupt.objects.get(pk=interrupt.pk)
    assert (stored.status, stored.version, stored.closed_at) == ("pending", interrupt.version + 1, None)


def test_reopen_and_close_move_the_version_with_the_status():
    interrupt = make.interrupt()
    now = timezone.now()
    assert Interrupt.objects.filter(pk=interrupt.pk).close(Interrupt.Status.CANCELLED, "the run failed", now) == 1
    assert Interrupt.objects.filter(pk=interrupt.pk).reopen() == 1
    stored = Interrupt.objects.get(pk=interrupt.pk)
    assert (stored.status, stored.closed_at, stored.closed_reason) == ("pending", None, "")
    assert stored.version == interrupt.version + 2


def test_only_pending_interrupts_expire_or_are_cancelled_with_their_run():
    interrupt = make.interrupt()
    now = timezone.now()
    Interrupt.objects.filter(pk=interrupt.pk).answer(interrupt.version, "resolved", now)
    assert Interrupt.objects.filter(pk=interrupt.pk).expire("late", now) == 0
    assert Interrupt.objects.filter(pk=interrupt.pk).cancel_pending("failed", now) == 0
    assert Interrupt.objects.get(pk=interrupt.pk).status == "resolved"


def test_a_run_ends_once_and_is_settled_once():
    run = make.run(status="streaming")
    now = timezone.now()
    assert Run.objects.filter(pk=run.pk).fail("LOST", "gone", "", now) == 1
    assert Run.objects.filter(pk=run.pk).finish(status=Run.Status.SUCCEEDED) == 0
    assert Run.objects.filter(pk=run.pk).fail("AGAIN", "gone", "", now) == 0
    user = make.user()
    assert Run.objects.filter(pk=run.pk).settle(Run.Settlement.CLOSED, user, now) == 1
    assert Run.objects.filter(pk=run.pk).settle(Run.Settlement.RESENT, user, now) == 0
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.error_code, stored.settlement) == ("failed", "LOST", "closed")


def test_only_the_claimant_requeues_a_run():
    run = make.run(status="queued")
    now = timezone.now()
    assert Run.objects.filter(pk=run.pk).claim("w1", now, now) == 1
    assert Run.objects.filter(pk=run.pk).claim("w2", now, now) == 0
    assert Run.objects.filter(pk=run.pk).requeue("w2", attempts=1) == 0
    assert Run.objects.filter(pk=run.pk).requeue("w1", attempts=1) == 1
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.claimed_by, stored.attempts) == ("queued", "", 1)


def test_a_decision_is_superseded_once():
    interrupt = make.interrupt()
    decision = make.decision(interrupt, make.user())
    first, later = timezone.now(), timezone.now()
    assert interrupt.decisions.supersede(first) == 1
    assert Decision.objects.filter(pk=decision.pk).supersede(later) == 0
    assert Decision.objects.get(pk=decision.pk).superseded_at == first
