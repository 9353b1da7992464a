"""The model invariants the audit trail relies on, checked against the database."""

import pytest
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from interrupts.models import Decision, Event, Interrupt, Run

from .. import factories as make

pytestmark = pytest.mark.django_db


def refused(exc_type=DatabaseError):
    """The database itself refuses: the statement fails inside its own savepoint."""
    return pytest.raises(exc_type)


class TestEvents:
    def test_sequence_numbers_are_unique_within_a_thread(self):
        run = make.run()
        make.event(run, seq=1)
        with refused(IntegrityError), transaction.atomic():
            make.event(run, seq=1, type="RUN_FINISHED")

    def test_the_same_sequence_number_is_fine_on_another_thread(self):
        first, second = make.run(), make.run()
        make.event(first, seq=1)
        make.event(second, seq=1)
        assert Event.objects.filter(seq=1).count() == 2

    def test_sequence_numbers_start_at_one(self):
        with refused(IntegrityError), transaction.atomic():
            make.event(make.run(), seq=0)

    def test_an_event_row_cannot_be_updated_through_sql(self):
        event = make.event(make.run(), seq=1)
        with refused() as caught, transaction.atomic():
            Event.objects.filter(pk=event.pk).update(type="RUN_ERROR")
        assert "append-only" in str(caught.value)
        event.refresh_from_db()
        assert event.type == "RUN_STARTED"

    def test_an_event_row_cannot_be_saved_twice(self):
        event = make.event(make.run(), seq=1)
        event.type = "RUN_ERROR"
        with pytest.raises(ValueError, match="append-only"):
            event.save()


class TestRuns:
    def test_c6_run_ids_are_unique_within_a_thread(self):
        run = make.run()
        with refused(IntegrityError), transaction.atomic():
            make.run(run.thread, run_id=run.run_id)

    def test_a_resume_key_starts_at_most_one_run(self):
        make.run(resume_key="k" * 64)
        with refused(IntegrityError), transaction.atomic():
            make.run(resume_key="k" * 64)

    def test_an_unknown_status_is_refused_by_the_database(self):
        run = make.run()
        with refused(IntegrityError), transaction.atomic():
            Run.objects.filter(pk=run.pk).update(status="paused")

    def test_a_run_links_to_its_parent(self):
        parent = make.run()
        child = make.run(parent.thread, parent=parent)
        assert list(parent.children.all()) == [child]


class TestInterrupts:
    def test_interrupt_ids_are_unique_within_a_run(self):
        run = make.run()
        make.interrupt(run, interrupt_id="int-1")
        with refused(IntegrityError), transaction.atomic():
            make.interrupt(run, interrupt_id="int-1")

    def test_the_same_interrupt_id_may_recur_in_another_run(self):
        first = make.run()
        make.interrupt(first, interrupt_id="int-1")
        make.interrupt(make.run(first.thread), interrupt_id="int-1")
        assert Interrupt.objects.filter(interrupt_id="int-1").count() == 2

    def test_an_unknown_status_is_refused_by_the_database(self):
        interrupt = make.interrupt()
        with refused(IntegrityError), transaction.atomic():
            Interrupt.objects.filter(pk=interrupt.pk).update(status="maybe")


class TestDecisions:
    def test_a_reviewer_has_at_most_one_live_decision_per_interrupt(self):
        # A quorum gathers one live approval per person, never two from the same one.
        interrupt, alice, bob = make.interrupt(), make.user(), make.user()
        make.decision(interrupt, alice, payload={"approved": True})
        with refused(IntegrityError), transaction.atomic():
            make.decision(interrupt, alice, payload={"approved": False})
        make.decision(interrupt, bob, payload={"approved": True})
        assert sorted(d.user.username for d in interrupt.decisions.all()) == sorted([alice.username, bob.username])

    def test_a_revision_supersedes_the_live_decision_and_keeps_it(self):
        interrupt, alice = make.interrupt(), make.user()
        first = make.decision(interrupt, alice, payload={"approved": True})
        assert Decision.objects.filter(pk=first.pk).update(superseded_at=timezone.now()) == 1
        second = make.decision(interrupt, alice, payload={"approved": False})
        live = interrupt.decisions.filter(superseded_at__isnull=True)
        assert list(live) == [second]
        assert interrupt.decisions.count() == 2

    def test_the_answer_of_a_decision_cannot_be_changed_through_sql(self):
        decision = make.decision(make.interrupt(), make.user(), payload={"approved": True})
        with refused() as caught, transaction.atomic():
            Decision.objects.filter(pk=decision.pk).update(payload={"approved": False})
        assert "immutable" in str(caught.value)
        decision.refresh_from_db()
        assert decision.payload == {"approved": True}

    @pytest.mark.parametrize("change", [{"action": "approve"}, {"policy": "lax"}, {"required_approvals": 1}])
    def test_who_approved_under_which_policy_cannot_be_changed_through_sql(self, change):
        # The columns added with approval policies (migration 0010) are held like the rest.
        decision = make.decision(make.interrupt(), make.user(), payload={"approved": True}, action="edit",
                                 policy="two keys", required_approvals=2)
        with refused() as caught, transaction.atomic():
            Decision.objects.filter(pk=decision.pk).update(**change)
        assert "immutable" in str(caught.value)

    def test_superseding_cannot_smuggle_in_another_change(self):
        decision = make.decision(make.interrupt(), make.user(), payload={"approved": True})
        with refused(), transaction.atomic():
            Decision.objects.filter(pk=decision.pk).update(
                superseded_at=timezone.now(), status="cancelled", payload=None
            )

    def test_a_decision_is_superseded_only_once(self):
        decision = make.decision(make.interrupt(), make.user(), payload={"approved": True})
        Decision.objects.filter(pk=decision.pk).update(superseded_at=timezone.now())
        with refused(), transaction.atomic():
            Decision.objects.filter(pk=decision.pk).update(superseded_at=timezone.now())

    def test_a_decision_row_cannot_be_saved_twice(self):
        decision = make.decision(make.interrupt(), make.user(), payload={"approved": True})
        decision.payload = {"approved": False}
        with pytest.raises(ValueError, match="immutable"):
            decision.save()

    def test_a_cancelled_decision_carries_no_payload(self):
        with refused(IntegrityError), transaction.atomic():
            make.decision(make.interrupt(), make.user(), status="cancelled", payload={"approved": True})

    def test_a_cancelled_decision_without_payload_is_stored(self):
        decision = make.decision(make.interrupt(), make.user(), status="cancelled")
        decision.refresh_from_db()
        assert decision.status == "cancelled" and decision.payload is None
