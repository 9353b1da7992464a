"""Expiry end to end: the people who may decide are warned first, a policy may escalate then, and an
unanswered request reaches its agent as cancelled because it expired, never as a refusal.

``Asker`` raises one tool call whose expiresAt is the number of seconds its message names ("deploy 40").
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest

from ..loopback import LoopbackAgent, frame, stream
from ..servers import ServedApp, free_port, manage, stop_process
from .conftest import finished_run, wait_for
from .test_webhooks import Receiver

PEOPLE = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
decide = Permission.objects.get(codename="decide_interrupt", content_type__app_label="interrupts")
for name, email in (("Deployers", "dee@example.com"), ("Oncall", "ona@example.com")):
    group = Group.objects.create(name=name)
    group.permissions.add(decide)
    get_user_model().objects.create_user(name.lower(), email=email).groups.add(group)
"""


class Asker(LoopbackAgent):
    def __init__(self) -> None:
        super().__init__()
        self.resumes: list[dict] = []

    def answer(self, handler, path, body) -> None:
        ids = {"threadId": body["threadId"], "runId": body["runId"]}
        if body.get("resume"):
            self.resumes.append(body)
            stream(handler, [frame({"type": "RUN_STARTED", **ids}),
                             frame({"type": "RUN_FINISHED", **ids, "outcome": {"type": "success"}})])
            return
        tool, seconds = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user").split()
        due = (datetime.now(UTC) + timedelta(seconds=int(seconds))).isoformat().replace("+00:00", "Z")
        stream(handler, [
            frame({"type": "RUN_STARTED", **ids}),
            frame({"type": "TOOL_CALL_START", "toolCallId": "tc-1", "toolCallName": tool}),
            frame({"type": "TOOL_CALL_ARGS", "toolCallId": "tc-1", "delta": "{}"}),
            frame({"type": "TOOL_CALL_END", "toolCallId": "tc-1"}),
            frame({"type": "RUN_FINISHED", **ids, "outcome": {"type": "interrupt", "interrupts": [
                {"id": f"run-{tool}", "reason": "tool_call", "toolCallId": "tc-1", "message": f"{tool}?",
                 "expiresAt": due}]}}),
        ])


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    agent = Asker().start()
    hooks = Receiver(free_port(), tmp_path_factory.mktemp("hooks") / "deliveries.jsonl").start()
    app = ServedApp(tmp_path_factory.mktemp("expiry"), COUNTERSIGN_POLL_INTERVAL="0.2",
                    COUNTERSIGN_SWEEP_INTERVAL="0.2", COUNTERSIGN_EXPIRY_WARNING_SECONDS="30",
                    COUNTERSIGN_WEBHOOK_RETRY_BASE="0.5").start()
    try:
        done = manage("shell", "-c", PEOPLE, env=app.env)
        assert done.returncode == 0, done.stderr
        with app.api() as staff:
            for body in ({"name": "ops", "url": f"{agent.url}/ops/"},):
                assert staff.post("/api/agents/", json=body).status_code == 201
            for policy in ({"name": "ops", "agent": "ops", "groups": ["Deployers"]},
                           {"name": "ops drop", "agent": "ops", "tool_name": "drop", "groups": ["Deployers"],
                            "target_minutes": 600, "backup_group": "Oncall", "on_expiry": "escalate"}):
                made = staff.post("/api/policies/", json=policy)
                assert made.status_code == 201, made.text
            hook = staff.post("/api/webhooks/", json={"name": "expiry", "url": hooks.url,
                                                      "events": ["expiring", "escalated", "expired"]})
            assert hook.status_code == 201, hook.text
        yield app, agent, hooks
    finally:
        app.stop()
        agent.stop()
        stop_process(hooks.process)


def asked(app, message: str) -> dict:
    with app.api() as api:
        run = api.post("/api/threads/", json={"agent": "ops", "message": message}).json()
        assert finished_run(api, run["run_id"])["status"] == "interrupted"
        [interrupt] = wait_for(lambda: api.get("/api/interrupts/", params={"thread": run["thread"]}).json()["results"])
        return interrupt


def events_about(hooks, event: str, interrupt: dict) -> list[dict]:
    found = [json.loads(base64.b64decode(line["body"])) for line in hooks.received(event)]
    return [body for body in found if body["interrupt"]["interruptId"] == interrupt["interrupt_id"]
            and body["thread"]["threadId"] == interrupt["thread"]]


def notices(app, event: str) -> list[str]:
    done = manage("shell", "-c", "import json\nfrom interrupts.models import EmailNotice\n"
                  f"told = EmailNotice.objects.filter(event={event!r}).values_list('user__username', flat=True)\n"
                  "print(json.dumps(sorted(told)))", env=app.env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_people_who_may_decide_are_warned_once_before_it_expires(site):
    app, agent, hooks = site
    interrupt = asked(app, "deploy 25")  # inside the 30 s warning: warned at the next sweep
    [warned] = wait_for(lambda: events_about(hooks, "expiring", interrupt))
    assert warned["type"] == "interrupt.expiring" and warned["expiresAt"]
    with app.api() as api:
        assert api.get(f"/api/interrupts/{interrupt['id']}/").json()["status"] == "pending"  # warned, not expired
    assert "deployers" in notices(app, "expiring")
    # Once: later sweeps do not warn again.
    later = asked(app, "deploy 25")
    wait_for(lambda: events_about(hooks, "expiring", later))
    assert len(events_about(hooks, "expiring", interrupt)) == 1


def test_an_unanswered_request_reaches_its_agent_as_cancelled_because_it_expired(site):
    app, agent, hooks = site
    interrupt = asked(app, "deploy 2")
    [resume] = wait_for(lambda: [r for r in agent.resumes if r["threadId"] == interrupt["thread"]], timeout=20)
    [entry] = resume["resume"]
    assert (entry["interruptId"], entry["status"]) == ("run-deploy", "cancelled")
    assert "payload" not in entry or entry["payload"] is None  # no denial: nobody answered
    assert entry["metadata"]["countersign"]["expired"] is True
    with app.api() as api:
        assert api.get(f"/api/interrupts/{interrupt['id']}/").json()["status"] == "expired"
    wait_for(lambda: events_about(hooks, "expired", interrupt))


def test_a_policy_that_escalates_on_expiry_escalates_when_the_warning_goes(site):
    app, agent, hooks = site
    interrupt = asked(app, "drop 25")
    wait_for(lambda: events_about(hooks, "expiring", interrupt))
    [escalated] = wait_for(lambda: events_about(hooks, "escalated", interrupt))
    assert escalated["escalatedTo"] == "Oncall"
    with app.api() as api:
        assert api.get(f"/api/interrupts/{interrupt['id']}/").json()["escalated_to"] == "Oncall"
    assert "oncall" in notices(app, "escalated")


def test_escalating_on_expiry_needs_a_backup_group(site):
    app, agent, hooks = site
    with app.api() as staff:
        refused = staff.patch("/api/policies/ops/", json={"on_expiry": "escalate"})
    assert refused.status_code == 400 and "backup group" in refused.text
