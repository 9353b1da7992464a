"""Issue 11's "Done when", in real Chromium: a countersignature that means something.

One deployment of its own (no self-approving policy: the site default
forbids self-approval), whose operator says deploys take two Deployers. Four
people, each in a browser context of their own:

- ``requester`` (a Deployer) starts the deployer's run on the threads page,
  and cannot decide it: the card is read-only, and a forged POST is refused;
- ``outsider`` (a Reviewer, not a Deployer) sees it read-only, "Waiting for Deployers.";
- ``approver1`` answers and the card says "1 of 2 approvals";
- ``approver2`` completes the quorum, and the deployer demo agent (which
  here refuses unsigned requests) verifies the signature and the
  fingerprint, deploys and names both approvers.

Then ``manage.py audit verify`` passes, and fails, naming the entry, after a
decision row is changed with raw SQL.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from playwright.sync_api import expect

from ..servers import ROOT, ServedApp, manage
from .conftest import Reviewer

TIMEOUT = 15_000
PASSWORD = "deploy-pass-1234"
POLICY = "deploys need two Deployers"

PEOPLE = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission

deployers = Group.objects.create(name="Deployers")
deployers.permissions.add(Permission.objects.get(codename="decide_interrupt", content_type__app_label="interrupts"))
reviewers = Group.objects.get(name="Reviewers")
for username, group in [("requester", deployers), ("outsider", reviewers),
                        ("approver1", deployers), ("approver2", deployers)]:
    get_user_model().objects.create_user(username, password={password!r}).groups.add(group)
"""


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    # COUNTERSIGN_DEMO_REQUIRE_SIGNATURE: the deployer refuses any request Countersign did not sign.
    app = ServedApp(tmp_path_factory.mktemp("countersign"), self_approving=False, COUNTERSIGN_POLL_INTERVAL="0.2",
                    COUNTERSIGN_DEMO_REQUIRE_SIGNATURE="true").start()
    try:
        done = manage("shell", "-c", PEOPLE.format(password=PASSWORD), env=app.env)
        assert done.returncode == 0, done.stderr
        with app.api() as api:  # the demo reviewer is staff: they write policies
            # More specific than the deployer's shipped "demo: deployer (self-approval allowed)".
            created = api.post("/api/policies/", json={
                "name": POLICY, "agent": "deployer", "reason": "countersign:deploy", "groups": ["Deployers"],
                "required_approvals": 2, "allow_self_approval": False,
            })
            assert created.status_code == 201, created.text
            shipped = api.get("/api/policies/").json()
            shipped = shipped.get("results", shipped)
            assert "demo: deployer (self-approval allowed)" in [p["name"] for p in shipped]
        yield app
    finally:
        app.stop()


@pytest.fixture
def people(browser, deployment):
    opened: dict[str, Reviewer] = {}

    def login(username: str) -> Reviewer:
        opened[username] = Reviewer(browser, deployment, username, PASSWORD)
        return opened[username]

    yield login
    for person in opened.values():
        person.close()


def card_of(page):
    return page.locator("[data-card][data-interrupt-id='approve-deploy']")


def scoped_inbox(person: Reviewer, thread: str):
    """The inbox as it opens ("Waiting for me"), narrowed to the thread."""
    page = person.open(f"/inbox/?thread={thread}")
    expect(page.get_by_test_id("scope-mine")).to_have_attribute("aria-current", "page")
    return page


def all_pending(person: Reviewer, thread: str):
    """"All pending", one click away from "Waiting for me"."""
    page = scoped_inbox(person, thread)
    page.get_by_test_id("scope-all").click()
    page.wait_for_url(re.compile(r"scope=all"))
    expect(card_of(page)).to_be_visible(timeout=TIMEOUT)
    return page


def forged_post(person: Reviewer, url: str, *, json_body: dict | None = None, form: dict | None = None,
                htmx: bool = False) -> dict:
    """A POST from the person's own page (their session, their CSRF token), as a script in it would send."""
    [token] = [c["value"] for c in person.context.cookies() if c["name"] == "csrftoken"]
    return person.page.evaluate(
        """async ([url, token, jsonBody, form, htmx]) => {
            const headers = {"X-CSRFToken": token};
            if (htmx) headers["HX-Request"] = "true";
            let body;
            if (jsonBody !== null) { headers["Content-Type"] = "application/json"; body = JSON.stringify(jsonBody); }
            else { body = new URLSearchParams(form); }
            const response = await fetch(url, {method: "POST", headers, body, credentials: "same-origin"});
            return {status: response.status, text: await response.text()};
        }""",
        [url, token, json_body, form, htmx],
    )


def audit_verify(deployment) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "audit", "verify"], cwd=ROOT, env=deployment.env,
                          capture_output=True, text=True, timeout=120, check=False)


# Raw SQL as someone with the database's keys would run it: the guarding trigger
# dropped (SQLite) or disabled (PostgreSQL) first, as tests/e2e/test_trail.py does.
TAMPER = """
from django.db import connection, transaction

with transaction.atomic(), connection.cursor() as cursor:
    if connection.vendor == "postgresql":
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE interrupts_decision DISABLE TRIGGER USER")
    else:
        cursor.execute("DROP TRIGGER interrupts_decision_immutable")
    cursor.execute("UPDATE interrupts_decision SET payload = %s WHERE id = %s", ['{{"build": 43}}', {pk}])
    assert cursor.rowcount == 1
"""


def test_two_deployers_countersign_a_deploy_the_requester_cannot_and_the_trail_shows_tampering(people, deployment):
    # The requester starts the deploy on the threads page.
    requester = people("requester")
    page = requester.open("/threads/")
    page.locator("select[name=agent]").select_option("deployer")
    page.locator("textarea[name=message]").fill("Ship build 42")
    page.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(r"/threads/thread-[0-9a-f]+/$"))
    thread = page.url.rstrip("/").rsplit("/", 1)[1]
    expect(page.locator(".run-end.outcome-interrupt")).to_be_visible(timeout=TIMEOUT)
    with deployment.api() as api:
        [asked] = api.get("/api/interrupts/", params={"thread": thread}).json()["results"]
    decide_api = f"/api/interrupts/{asked['id']}/decide/"

    # Not waiting for the requester; under "All pending" the card is read-only and says why.
    page = scoped_inbox(requester, thread)
    expect(card_of(page)).to_have_count(0)
    expect(page.get_by_test_id("inbox-count")).to_have_text("0")
    page = all_pending(requester, thread)
    card = card_of(page)
    expect(card.get_by_test_id("read-only")).to_have_text(
        "You started this run, so another reviewer must decide it: waiting for Deployers.")
    expect(card.get_by_test_id("approvals")).to_have_text("0 of 2 approvals")
    for button in ("Approve", "Send answer", "Reject", "Dismiss"):
        expect(card.get_by_role("button", name=button)).to_have_count(0)
    expect(card.locator("form")).to_have_count(0)
    # Forged from the requester's page: the API refuses it, 403 SELF_APPROVAL...
    refused = forged_post(requester, decide_api, json_body={"action": "respond", "payload": {"build": 42}})
    assert refused["status"] == 403, refused
    assert '"code":"SELF_APPROVAL"' in refused["text"].replace(" ", ""), refused
    # ...and so does the inbox's own form endpoint, saying why on the card.
    refused = forged_post(requester, f"/interrupts/{asked['id']}/decide/", htmx=True,
                          form={"action": "respond", "payload": '{"build": 42}'})
    assert "You started the run that raised interrupt approve-deploy" in refused["text"], refused
    with deployment.api() as api:
        detail = api.get(f"/api/interrupts/{asked['id']}/").json()
    assert (detail["status"], detail["decisions"]) == ("pending", [])
    requester.screenshot("countersign-requester")

    # A Reviewer outside the policy's group: read-only, waiting for Deployers; a forged answer is refused.
    outsider = people("outsider")
    page = scoped_inbox(outsider, thread)
    expect(card_of(page)).to_have_count(0)
    page = all_pending(outsider, thread)
    card = card_of(page)
    expect(card.get_by_test_id("read-only")).to_have_text("Waiting for Deployers.")
    expect(card.get_by_role("button", name="Approve")).to_have_count(0)
    refused = forged_post(outsider, decide_api, json_body={"action": "respond", "payload": {"build": 42}})
    assert refused["status"] == 403 and '"code":"NOT_ELIGIBLE"' in refused["text"].replace(" ", ""), refused

    # The first Deployer: it waits for them; their answer is the first of two.
    approver1 = people("approver1")
    page = scoped_inbox(approver1, thread)
    card = card_of(page)
    expect(card).to_be_visible(timeout=TIMEOUT)
    expect(card.get_by_test_id("read-only")).to_have_count(0)
    card.locator("input[name='root[build]']").fill("42")
    card.get_by_role("button", name="Approve", exact=True).click()  # the deployer's form asks to go ahead
    expect(card.get_by_test_id("approvals")).to_have_text("1 of 2 approvals", timeout=TIMEOUT)
    expect(card.get_by_test_id("mine")).to_contain_text("it waits for 1 more approval")
    expect(page.get_by_test_id("resumed-run")).to_have_count(0)
    approver1.screenshot("countersign-first-approval")
    with deployment.api() as api:
        detail = api.get(f"/api/interrupts/{asked['id']}/").json()
    assert detail["status"] == "pending" and detail["resumed_by"] is None
    assert [d["user"]["username"] for d in detail["decisions"]] == ["approver1"]
    # No longer waiting for approver1; still for approver2, who sees the count and the first approver.
    page = approver1.open(f"/inbox/?thread={thread}")
    expect(card_of(page)).to_have_count(0)

    approver2 = people("approver2")
    page = scoped_inbox(approver2, thread)
    card = card_of(page)
    expect(card.get_by_test_id("approvals")).to_have_text("1 of 2 approvals", timeout=TIMEOUT)
    expect(card.locator(".approvers")).to_contain_text("approver1")
    card.locator("input[name='root[build]']").fill("42")
    card.get_by_role("button", name="Approve", exact=True).click()  # the deployer's form asks to go ahead
    expect(page.get_by_test_id("resumed-run")).to_be_visible(timeout=TIMEOUT)

    # The deployer verified the signature and the fingerprint (it refuses unsigned requests here,
    # and names approvers only from a verified attestation), and deployed.
    page = approver2.open(f"/threads/{thread}/")
    expect(page.locator(".bubble").last).to_have_text(
        re.compile(r"Deployed build 42, approved by approver1, approver2\."), timeout=TIMEOUT)
    approver2.screenshot("countersign-deployed")
    with deployment.api() as api:
        detail = api.get(f"/api/interrupts/{asked['id']}/").json()
        assert detail["status"] == "resolved"
        resumed = api.get(f"/api/runs/{detail['resumed_by']}/").json()
    assert resumed["status"] == "succeeded", resumed
    [entry] = resumed["input"]["resume"]
    attested = entry["metadata"]["countersign"]
    assert [(d["username"], d["action"]) for d in attested["decisions"]] == [("approver1", "respond"),
                                                                              ("approver2", "respond")]
    assert attested["policy"] == {"name": POLICY, "requiredApprovals": 2}

    # The trail verifies; a decision changed behind its back is named.
    verified = audit_verify(deployment)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("verified ")
    [(pk, thread_id)] = deployment.query(
        "SELECT d.id, t.thread_id FROM interrupts_decision d JOIN auth_user u ON u.id = d.user_id "
        "JOIN interrupts_interrupt i ON i.id = d.interrupt_id JOIN interrupts_run r ON r.id = i.run_id "
        "JOIN interrupts_thread t ON t.id = r.thread_id WHERE u.username = %s",
        "approver1")
    [(seq,)] = deployment.query("SELECT seq FROM interrupts_auditentry WHERE decision_id = %s AND kind = %s",
                                pk, "decision")
    tampered = manage("shell", "-c", TAMPER.format(pk=pk), env=deployment.env)
    assert tampered.returncode == 0, tampered.stderr
    broken = audit_verify(deployment)
    assert broken.returncode == 1, (broken.stdout, broken.stderr)
    # The first problem names the entry (other stderr lines, e.g. django-axes' banner, aside).
    assert [line for line in broken.stderr.splitlines() if line.startswith("BROKEN:")][0] == (
        f"BROKEN: entry {seq}: decision {pk} (approve-deploy in thread {thread_id}, by approver1) no longer "
        "matches what was recorded "
        "(payload changed in the row)"
    )
