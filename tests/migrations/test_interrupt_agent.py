"""Migrations 0034-0035 on a database from before them: every interrupt gets its run's agent, which the
inbox's agent filter then reads, on whichever back end DATABASE_URL names."""

import pytest

from .conftest import forward

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def back_before_0034(back_to):
    return back_to(("interrupts", "0033_passkeys"))


def test_each_interrupt_gets_its_run_s_agent(back_before_0034):
    old = back_before_0034
    Agent, Thread, Run, Interrupt = (old.get_model("interrupts", name) for name in ("Agent", "Thread", "Run", "Interrupt"))
    made = {}
    for name in ("mailer", "deployer"):
        agent = Agent.objects.create(name=f"{name}-m", url=f"http://127.0.0.1:9/{name}/")
        thread = Thread.objects.create(thread_id=f"t-{name}", agent=agent)
        run = Run.objects.create(thread=thread, agent=agent, run_id=f"r-{name}", input={}, status="interrupted")
        made[agent.pk] = [Interrupt.objects.create(run=run, interrupt_id=f"i-{n}", reason="confirmation", raw={}).pk
                          for n in range(3)]

    forward()

    from interrupts.models import Interrupt as Now
    for agent_pk, pks in made.items():
        assert set(Now.objects.filter(run_agent_id=agent_pk).values_list("pk", flat=True)) == set(pks)
        assert all(i.run_agent_id == i.run.agent_id for i in Now.objects.filter(pk__in=pks).select_related("run"))
