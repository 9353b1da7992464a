"""Migration 0037 on a database from before it: every thread's stored conversation held all its events
(each batch wrote it), so each is marked folded to its last event, on whichever back end DATABASE_URL names."""

import pytest

from .conftest import forward

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def back_before_0037(back_to):
    return back_to(("interrupts", "0036_run_run_id"))


def test_each_thread_is_folded_to_its_last_event(back_before_0037):
    old = back_before_0037
    Agent, Thread = (old.get_model("interrupts", name) for name in ("Agent", "Thread"))
    agent = Agent.objects.create(name="folded-m", url="http://127.0.0.1:9/folded/")
    made = {Thread.objects.create(thread_id=f"t-{n}", agent=agent, last_seq=n * 7, messages=[]).pk: n * 7
            for n in range(3)}

    forward()

    from interrupts.hub import events
    from interrupts.models import Thread as Now
    for thread in Now.objects.filter(pk__in=made):
        assert thread.folded_seq == thread.last_seq == made[thread.pk]
        assert events.conversation_of(thread) == ([], None)  # as stored: nothing read from the log
