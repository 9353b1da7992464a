"""`manage.py demo_requests`, as `make serve` runs it before serving: a new database's first login finds work."""

import time

import pytest
from django.core.management import CommandError, call_command

from interrupts.models import Run, Thread

from ..servers import ServedApp, manage


@pytest.mark.django_db
def test_it_queues_one_request_per_demo_agent_once(settings, capsys):
    settings.DEBUG = True
    call_command("demo_requests")
    queued = {run.agent.name: run.input["messages"][-1]["content"] for run in Run.objects.select_related("agent")}
    assert set(queued) == {"mailer", "deployer", "janitor", "filing", "planner"}
    assert queued["deployer"] == "Deploy build 812 to staging"
    assert "Queued 5 sample requests" in capsys.readouterr().out
    call_command("demo_requests")  # a database with threads is left alone
    assert Thread.objects.count() == 5 and "no sample requests added" in capsys.readouterr().out


@pytest.mark.django_db
def test_it_refuses_a_production_database(settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="DEBUG off"):
        call_command("demo_requests")
    assert not Thread.objects.exists()


def test_served_they_wait_in_the_inbox_as_the_demo_agents_asked(tmp_path):
    app = ServedApp(tmp_path).prepare()
    done = manage("demo_requests", env=app.env)
    assert done.returncode == 0, done.stderr
    app.launch().ready()
    try:
        with app.api() as api:
            deadline = time.monotonic() + 30
            while (found := api.get("/api/interrupts/").json())["count"] < 6 and time.monotonic() < deadline:
                time.sleep(0.1)
        messages = sorted(i["message"] or "" for i in found["results"])
        # The planner asks two things at once; the deployer asks about the build the message named.
        assert found["count"] == 6 and "Deploy build 812 to staging?" in messages
    finally:
        app.stop()
