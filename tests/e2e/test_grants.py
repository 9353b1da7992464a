"""Standing grants end to end: a served app, a real HTTP agent, people with tokens, and the signed resumes.

``Deployer`` asks to run a tool with the args the user's message names
(``"deploy staging"`` → ``deploy {"env": "staging"}``) and succeeds on resume.
Its policies: Deployers decide, one approval, no self-approval; ``migrate``
needs two Deployers; ``drop`` always asks a person.

People: ``granter`` and ``second`` (Deployers), ``requester`` (starts the
runs), ``viewer`` (logged in, may not decide).
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from ag_ui.core import RunAgentInput

from interrupts.protocol import signing
from interrupts.sdk.verify import attested_approvals

from ..loopback import LoopbackAgent, frame, stream
from ..servers import ServedApp, manage
from .conftest import finished_run, wait_for

PEOPLE = """
import json
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from interrupts.hub import tokens

deployers = Group.objects.create(name="Deployers")
deployers.permissions.add(Permission.objects.get(codename="decide_interrupt", content_type__app_label="interrupts"))
keys = {}
for username, joined in {"granter": [deployers], "second": [deployers], "requester": [], "viewer": []}.items():
    user = get_user_model().objects.create_user(username)
    user.groups.add(*joined)
    keys[username] = tokens.issue(user)[1]
print(json.dumps(keys))
"""


class Deployer(LoopbackAgent):
    """Proposes ``<tool> {"env": <env>}`` from a message "<tool> <env>"; keeps every request it receives."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[bytes, dict, dict]] = []

    def answer(self, handler, path, body) -> None:
        self.requests.append((handler.raw_body, dict(handler.headers), body))
        ids = {"threadId": body["threadId"], "runId": body["runId"]}
        if body.get("resume"):
            stream(handler, [frame({"type": "RUN_STARTED", **ids}),
                             frame({"type": "RUN_FINISHED", **ids, "outcome": {"type": "success"}})])
            return
        tool, env = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user").split()
        stream(handler, [
            frame({"type": "RUN_STARTED", **ids}),
            frame({"type": "TOOL_CALL_START", "toolCallId": "tc-1", "toolCallName": tool}),
            frame({"type": "TOOL_CALL_ARGS", "toolCallId": "tc-1", "delta": json.dumps({"env": env})}),
            frame({"type": "TOOL_CALL_END", "toolCallId": "tc-1"}),
            frame({"type": "RUN_FINISHED", **ids, "outcome": {"type": "interrupt", "interrupts": [
                {"id": f"run-{tool}", "reason": "tool_call", "toolCallId": "tc-1", "message": f"{tool} to {env}?"}]}}),
        ])

    def resumes(self, thread: str) -> list[tuple[bytes, dict, dict]]:
        return [r for r in list(self.requests) if r[2]["threadId"] == thread and r[2].get("resume")]


class Site:
    def __init__(self, app: ServedApp, agent: Deployer, secret: str, tokens: dict[str, str]) -> None:
        self.app, self.agent, self.secret = app, agent, secret
        self.clients = {name: httpx.Client(base_url=app.url, headers={"Authorization": f"Token {token}"}, timeout=30)
                        for name, token in {"staff": app.token, **tokens}.items()}

    def __getitem__(self, username: str) -> httpx.Client:
        return self.clients[username]

    def shell(self, code: str) -> None:
        done = manage("shell", "-c", code, env=self.app.env)
        assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    agent = Deployer().start()
    app = ServedApp(tmp_path_factory.mktemp("grants"), self_approving=False, COUNTERSIGN_POLL_INTERVAL="0.2").start()
    made = None
    try:
        done = manage("shell", "-c", PEOPLE, env=app.env)
        assert done.returncode == 0, done.stderr
        tokens = json.loads(done.stdout.strip().splitlines()[-1])
        with app.api() as staff:
            created = staff.post("/api/agents/", json={"name": "ops", "url": f"{agent.url}/ops/"})
            assert created.status_code == 201, created.text
            for policy in ({"name": "ops", "agent": "ops", "groups": ["Deployers"]},
                           {"name": "ops migrate", "agent": "ops", "tool_name": "migrate", "groups": ["Deployers"],
                            "required_approvals": 2},
                           {"name": "ops drop", "agent": "ops", "tool_name": "drop", "groups": ["Deployers"],
                            "always_ask": True}):
                response = staff.post("/api/policies/", json=policy)
                assert response.status_code == 201, response.text
        made = Site(app, agent, created.json()["signing_secret"], tokens)
        yield made
    finally:
        if made is not None:
            for client in made.clients.values():
                client.close()
        app.stop()
        agent.stop()


def asked(site: Site, message: str) -> tuple[dict, dict]:
    """The requester's run of ``message`` ("<tool> <env>"), once it paused, and its interrupt as the API shows it."""
    api = site["requester"]
    response = api.post("/api/threads/", json={"agent": "ops", "message": message})
    assert response.status_code == 201, response.text
    run = response.json()
    assert finished_run(api, run["run_id"])["status"] == "interrupted"
    [interrupt] = wait_for(lambda: api.get("/api/interrupts/", params={"thread": run["thread"], "status": "all"})
                           .json()["results"])
    return run, site["staff"].get(f"/api/interrupts/{interrupt['id']}/").json()


def grant(site: Site, who: str = "granter", **fields) -> httpx.Response:
    body = {"agent": "ops", "tool_name": "deploy", "why": "staging deploys are routine this week", "hours": 4,
            "args_schema": {"type": "object", "properties": {"env": {"const": "staging"}}, "required": ["env"]},
            **fields}
    return site[who].post("/api/grants/", json=body)


def made(site: Site, **fields) -> dict:
    response = grant(site, **fields)
    assert response.status_code == 201, response.text
    return response.json()


def revoked(site: Site, grant_id: int) -> None:
    response = site["granter"].post(f"/api/grants/{grant_id}/revoke/")
    assert response.status_code == 200, response.text


def refused(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    assert response.json()["code"] == code, response.text
    return response.json()


def signed_resume(site: Site, thread: str) -> RunAgentInput:
    [(raw, headers, body)] = wait_for(lambda: site.agent.resumes(thread))
    header = next(v for k, v in headers.items() if k.lower() == signing.SIGNATURE_HEADER.lower())
    signing.verify(site.secret, header, raw, time.time())
    return RunAgentInput.model_validate(body)


def still_asks(site: Site, interrupt: dict, thread: str) -> None:
    """Pending with no decision, and nothing sent: a person must decide it."""
    assert (interrupt["status"], interrupt["decisions"]) == ("pending", []), interrupt
    assert site.agent.resumes(thread) == []


def test_a_grant_approves_the_next_matching_call_and_the_signed_resume_names_it(site):
    g = made(site)
    assert (g["author"], g["tool_name"], g["uses"], g["usable"]) == ("granter", "deploy", 0, True)
    run, interrupt = asked(site, "deploy staging")
    assert interrupt["status"] == "resolved", interrupt
    [decision] = interrupt["decisions"]
    assert (decision["user"]["username"], decision["action"]) == ("granter", "approve")
    resume = signed_resume(site, run["thread"])
    [approval] = attested_approvals(resume)["run-deploy"]
    assert (approval.username, approval.action, approval.grant) == ("granter", "approve",
                                                                    {"id": g["id"], "by": "granter"})
    assert resume.resume[0].payload == {"approved": True}
    assert site["staff"].get(f"/api/grants/{g['id']}/").json()["uses"] == 1
    # The trail names the grant in the decision's entry, and still verifies.
    check = manage("audit", "verify", env=site.app.env)
    assert check.returncode == 0, check.stdout + check.stderr
    revoked(site, g["id"])


def test_a_call_outside_the_grant_s_scope_still_asks_a_person(site):
    g = made(site)
    try:
        run, interrupt = asked(site, "deploy production")  # the args do not fit
        still_asks(site, interrupt, run["thread"])
        run, interrupt = asked(site, "rollback staging")  # another tool
        still_asks(site, interrupt, run["thread"])
        assert site["staff"].get(f"/api/grants/{g['id']}/").json()["uses"] == 0
    finally:
        revoked(site, g["id"])


def test_revocation_stops_the_next_use_and_is_said_once(site):
    g = made(site)
    revoked(site, g["id"])
    assert site["staff"].get(f"/api/grants/{g['id']}/").json()["revoked_by"] == "granter"
    refused(site["granter"].post(f"/api/grants/{g['id']}/revoke/"), 409, "ALREADY_REVOKED")
    run, interrupt = asked(site, "deploy staging")
    still_asks(site, interrupt, run["thread"])


def test_a_used_up_or_ended_grant_stops(site):
    g = made(site, max_uses=1)
    run, interrupt = asked(site, "deploy staging")
    assert interrupt["status"] == "resolved"
    run, interrupt = asked(site, "deploy staging")  # its one use is spent
    still_asks(site, interrupt, run["thread"])
    assert site["staff"].get(f"/api/grants/{g['id']}/").json()["usable"] is False

    ending = made(site)
    # Its hours pass (the clock moved on, here by its end moved back).
    site.shell(f"from django.utils import timezone\nfrom interrupts.models import Grant\n"
               f"Grant.objects.filter(pk={ending['id']}).update(expires_at=timezone.now())")
    run, interrupt = asked(site, "deploy staging")
    still_asks(site, interrupt, run["thread"])
    # Its recorded end put back (the trail would rightly call the moved one a change nobody recorded), and revoked.
    site.shell(f"from django.utils.dateparse import parse_datetime\nfrom interrupts.models import Grant\n"
               f"Grant.objects.filter(pk={ending['id']}).update(expires_at=parse_datetime({ending['expires_at']!r}))")
    revoked(site, ending["id"])


def test_always_ask_beats_any_grant(site):
    body = refused(grant(site, tool_name="drop", args_schema={}), 403, "ALWAYS_ASK")
    assert "ops drop" in body["detail"]
    # A grant made before its policy came to always ask stops applying then.
    g = made(site)
    try:
        changed = site["staff"].patch("/api/policies/ops/", json={"always_ask": True})
        assert changed.status_code == 200, changed.text
        run, interrupt = asked(site, "deploy staging")
        still_asks(site, interrupt, run["thread"])
    finally:
        site["staff"].patch("/api/policies/ops/", json={"always_ask": False})
        revoked(site, g["id"])


def test_under_two_people_a_grant_is_one_approval_and_its_author_adds_none(site):
    g = made(site, tool_name="migrate", args_schema={})
    try:
        run, interrupt = asked(site, "migrate staging")
        assert interrupt["status"] == "pending"
        assert [d["user"]["username"] for d in interrupt["decisions"]] == ["granter"]
        # The author approving too replaces the grant's approval: still one of two.
        again = site["granter"].post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": "approve"})
        assert again.status_code == 201, again.text
        assert site["staff"].get(f"/api/interrupts/{interrupt['id']}/").json()["status"] == "pending"
        second = site["second"].post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": "approve"})
        assert second.status_code == 201, second.text
        approvals = attested_approvals(signed_resume(site, run["thread"]))["run-migrate"]
        assert [(a.username, a.grant) for a in approvals] == [("granter", None), ("second", None)]
    finally:
        revoked(site, g["id"])


def test_a_grant_stops_when_its_author_may_no_longer_decide(site):
    g = made(site)
    site.shell("from django.contrib.auth.models import Group, User\n"
               "User.objects.get(username='granter').groups.remove(Group.objects.get(name='Deployers'))")
    try:
        run, interrupt = asked(site, "deploy staging")
        still_asks(site, interrupt, run["thread"])
    finally:
        site.shell("from django.contrib.auth.models import Group, User\n"
                   "User.objects.get(username='granter').groups.add(Group.objects.get(name='Deployers'))")
        revoked(site, g["id"])


def test_only_an_eligible_person_grants_and_within_bounds(site):
    refused(grant(site, who="viewer"), 403, "NOT_ELIGIBLE")
    refused(grant(site, who="requester"), 403, "NOT_ELIGIBLE")
    assert grant(site, hours=0).status_code == 400
    assert grant(site, hours=100_000).status_code == 400
    refused(grant(site, args_schema={"type": "nonsense"}), 400, "GRANT_SCOPE")
    assert grant(site, why="  ").status_code == 400
    g = made(site)
    # Only its author, staff or an eligible reviewer revokes it.
    refused(site["viewer"].post(f"/api/grants/{g['id']}/revoke/"), 403, "NOT_ELIGIBLE")
    revoked(site, g["id"])


def simulated(site: Site, **fields) -> dict:
    response = site["granter"].post("/api/grants/simulate/", json={"agent": "ops", "tool_name": "scale", **fields})
    assert response.status_code == 200, response.text
    return response.json()


def test_a_simulation_replays_the_history_and_the_grant_then_does_what_it_said(site):
    # History: two small scalings approved, a huge one rejected, a medium one left waiting.
    for env in ("small", "small", "huge", "medium"):
        run, interrupt = asked(site, f"scale {env}")
        if env != "medium":
            action = "reject" if env == "huge" else "approve"
            done = site["second"].post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": action})
            assert done.status_code == 201, done.text
    anything = simulated(site)
    assert {k: anything[k] for k in ("days", "calls", "covered", "approved", "refused_count", "unanswered")} == {
        "days": 30, "calls": 4, "covered": 4, "approved": 2, "refused_count": 1, "unanswered": 1}
    # The dangerous one, named: what people refused and the grant would have let through.
    [refused] = anything["refused"]
    assert (refused["outcome"], refused["by"], refused["label"]) == ("Rejected", "second", "scale to huge?")
    small = {"type": "object", "properties": {"env": {"const": "small"}}, "required": ["env"]}
    only_small = simulated(site, args_schema=small, days=7)
    assert (only_small["covered"], only_small["approved"], only_small["refused"]) == (2, 2, [])
    # Nothing was saved, and a schema it cannot use is refused as a grant's would be.
    before = made_so_far(site)
    simulated(site, args_schema=small)
    assert made_so_far(site) == before
    refused_with = site["granter"].post("/api/grants/simulate/", json={"agent": "ops", "tool_name": "scale",
                                                                       "args_schema": {"type": 7}})
    assert (refused_with.status_code, refused_with.json()["code"]) == (400, "GRANT_SCOPE")

    # Made, the grant does what the simulation said: the small ones go, the huge one still asks.
    g = made(site, tool_name="scale", args_schema=small)
    try:
        run, interrupt = asked(site, "scale small")
        assert interrupt["status"] == "resolved"
        run, interrupt = asked(site, "scale huge")
        still_asks(site, interrupt, run["thread"])
    finally:
        revoked(site, g["id"])


def made_so_far(site: Site) -> int:
    return site["staff"].get("/api/grants/").json()["count"]


def _grant_figures(site: Site) -> tuple[int, int, float]:
    insight = site["staff"].get("/api/insight/", params={"period": "day"}).json()["automatic"]
    [ops] = [e for e in insight["by_agent"] if e["agent"] == "ops"] or [{"by_grant": 0, "person_share": 1.0}]
    counted = next((float(line.rsplit(" ", 1)[1]) for line in site["staff"].get("/api/metrics/").text.splitlines()
                    if line.startswith('countersign_grant_approvals_total{agent="ops"}')), 0.0)
    return ops["by_grant"], int(counted), ops["person_share"]


def test_the_figures_count_a_grant_s_approvals_apart_from_people_s(site):
    run, interrupt = asked(site, "rollback staging")  # decided by a person
    done = site["second"].post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": "approve"})
    assert done.status_code == 201, done.text
    by_grant, counted, _ = _grant_figures(site)
    g = made(site)
    try:
        asked(site, "deploy staging")
    finally:
        revoked(site, g["id"])
    after, counted_after, share = _grant_figures(site)
    assert (after - by_grant, counted_after - counted) == (1, 1)
    assert 0 < share < 1  # a person decided some of ops's requests today, a grant others


# --- risk tiers: a policy's "auto-approve when" rule -------------------------------------------------

STAGING = {"type": "object", "properties": {"env": {"const": "staging"}}, "required": ["env"]}


def tier(site: Site, name: str, tool: str, **fields) -> httpx.Response:
    # Staff ("reviewer") set the rules: named, so that the policy lets them decide what they approve.
    return site["staff"].post("/api/policies/", json={"name": name, "agent": "ops", "tool_name": tool,
                                                      "groups": ["Deployers"], "users": ["reviewer"], **fields})


def test_a_policy_s_rule_approves_what_it_matches_in_its_setter_s_name_and_asks_for_the_rest(site):
    made_tier = tier(site, "ops restart", "restart", auto_approve=True, auto_approve_args=STAGING)
    assert made_tier.status_code == 201, made_tier.text
    assert made_tier.json()["auto_approve_by"] == "reviewer"  # the staff member who set it answers for it
    try:
        run, interrupt = asked(site, "restart staging")
        assert interrupt["status"] == "resolved", interrupt
        [decision] = interrupt["decisions"]
        assert (decision["user"]["username"], decision["action"]) == ("reviewer", "approve")
        [approval] = attested_approvals(signed_resume(site, run["thread"]))["run-restart"]
        assert (approval.username, approval.grant, approval.by_policy) == (
            "reviewer", None, {"name": "ops restart", "by": "reviewer"})
        check = manage("audit", "verify", env=site.app.env)
        assert check.returncode == 0, check.stdout + check.stderr

        run, interrupt = asked(site, "restart production")  # outside the rule
        still_asks(site, interrupt, run["thread"])
        # Switched off, it approves nothing more.
        off = site["staff"].patch("/api/policies/ops restart/", json={"auto_approve": False})
        assert (off.status_code, off.json()["auto_approve_by"]) == (200, None)
        run, interrupt = asked(site, "restart staging")
        still_asks(site, interrupt, run["thread"])
    finally:
        site["staff"].delete("/api/policies/ops restart/")


def test_a_tier_is_one_of_always_ask_two_people_or_auto_approve_and_its_rule_must_be_usable(site):
    body = refused(tier(site, "t1", "t1", auto_approve=True, always_ask=True), 400, "INVALID_REQUEST")
    assert "always asks" in json.dumps(body)
    body = refused(tier(site, "t2", "t2", auto_approve=True, required_approvals=2), 400, "INVALID_REQUEST")
    assert "one approval" in json.dumps(body)
    body = refused(tier(site, "t3", "t3", auto_approve=True, auto_approve_args={"type": "nonsense"}), 400,
                   "INVALID_REQUEST")
    assert "auto_approve_args" in body["fields"], body
    # Whoever sets the rule answers for each approval: a policy that would not let them decide refuses it.
    body = refused(tier(site, "t4", "t4", auto_approve=True, users=[]), 403, "NOT_ELIGIBLE")
    assert "in their name" in body["detail"]
    assert [p["name"] for p in site["staff"].get("/api/policies/").json()["results"]
            if p["name"] in ("t1", "t2", "t3", "t4")] == []


def policy_simulated(site: Site, **fields) -> dict:
    response = site["staff"].post("/api/policies/simulate/", json={"agent": "ops", "groups": ["Deployers"],
                                                                   **fields})
    assert response.status_code == 200, response.text
    return response.json()


def test_a_policy_simulation_replays_the_history_and_the_policy_then_does_what_it_said(site):
    # History of "resize": two staging approved, one production rejected, one staging rejected.
    for env, action in (("staging", "approve"), ("staging", "approve"), ("production", "reject"),
                        ("staging", "reject")):
        run, interrupt = asked(site, f"resize {env}")
        done = site["second"].post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": action})
        assert done.status_code == 201, done.text
    proposal = {"name": "ops resize", "tool_name": "resize", "auto_approve": True, "auto_approve_args": STAGING}
    sim = policy_simulated(site, **proposal)
    assert {k: sim[k] for k in ("calls", "covered", "approved", "refused_count")} == {
        "calls": 4, "covered": 3, "approved": 2, "refused_count": 1}
    [dangerous] = sim["refused"]
    assert (dangerous["outcome"], dangerous["label"]) == ("Rejected", "resize to staging?")
    # Two people on every ops call: the approved ones each had one.
    two = policy_simulated(site, policy="ops", required_approvals=2)
    assert two["second_approver"] >= 2 and two["covered"] == 0
    assert site["staff"].get("/api/policies/ops/").json()["required_approvals"] == 1  # nothing was saved
    refused(site["staff"].post("/api/policies/simulate/", json={"agent": "ops", "name": "x", "auto_approve": True,
                                                                "always_ask": True}), 400, "INVALID_REQUEST")

    # Saved, the policy does what the simulation said: staging goes, production still asks.
    assert tier(site, "ops resize", "resize", auto_approve=True, auto_approve_args=STAGING).status_code == 201
    try:
        run, interrupt = asked(site, "resize staging")
        assert interrupt["status"] == "resolved"
        run, interrupt = asked(site, "resize production")
        still_asks(site, interrupt, run["thread"])
        # Replayed now, the history holds the rule's own approval, and the count grew by it.
        again = policy_simulated(site, policy="ops resize")
        assert (again["calls"], again["covered"], again["approved"]) == (6, 4, 3)
        # Made to always ask, it would have asked a person for the one its rule approved.
        assert policy_simulated(site, policy="ops resize", auto_approve=False, always_ask=True)["asked"] == 1
    finally:
        site["staff"].delete("/api/policies/ops resize/")
