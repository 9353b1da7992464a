"""Issue 14's "Done when", whole, in real Chromium: a team of three through one day of requests.

Alice and Bob (group Payments) decide the janitor's requests within a 1 minute target; Carol (On call) is
the backup group. A real HTTP receiver process takes the team's webhooks; emails go to the server's log
(Django's console backend, the default). The team:

1. sees a new request arrive with a webhook (signed, once) and an email to the eligible two, not Carol;
2. Alice claims it and Bob's open inbox shows "Alice is reviewing" live, without a reload;
3. Bob bulk-approves every request matching a filter: Alice's claimed one is skipped and the report says so;
4. a request misses its target, escalates to On call (webhook, email, card, audit), and Carol decides it;
5. the dashboard's time-to-decision figures are those of the decisions just made.
"""

import base64
import email
import json
import re
import subprocess
import sys
import time
from datetime import datetime

import pytest
from playwright.sync_api import expect

from interrupts.reads.insight import nearest_rank
from interrupts.sdk.verify import check_signature

from ..e2e.test_webhooks import Receiver
from ..servers import ROOT, ServedApp, free_port, stop_process
from .conftest import Reviewer
from .test_review import TIMEOUT, start

PEOPLE = {"alice": ("Alice", "Payments"), "bob": ("Bob", "Payments"), "carol": ("Carol", "On call")}
PASSWORD = "team-pass-1234"


def shell(site, code: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=site.env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def receiver(tmp_path_factory):
    found = Receiver(free_port(), tmp_path_factory.mktemp("receiver") / "received.jsonl").start()
    yield found
    stop_process(found.process)


@pytest.fixture(scope="module")
def team_site(tmp_path_factory, receiver):
    app = ServedApp(tmp_path_factory.mktemp("team"), self_approving=True, COUNTERSIGN_POLL_INTERVAL="0.2",
                    COUNTERSIGN_WEBHOOK_RETRY_BASE="0.5", COUNTERSIGN_SWEEP_INTERVAL="0.5").start()
    people = json.dumps({name: [first, group] for name, (first, group) in PEOPLE.items()})
    secret = shell(app, f"""
import json
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from interrupts.hub import policies
from interrupts.models import Agent, Policy, Webhook
reviewers = Group.objects.get(name="Reviewers")
for name, (first, group) in json.loads({people!r}).items():
    user = get_user_model().objects.create_user(name, f"{{name}}@example.com", {PASSWORD!r}, first_name=first)
    user.groups.add(reviewers, Group.objects.get_or_create(name=group)[0])
scope = dict(agent=Agent.objects.get(name="janitor"), reason="", tool_name="")
policy = Policy.objects.filter(**scope).first() or Policy(**scope)
policy.name, policy.target_minutes, policy.allow_self_approval = "payments", 1, False
policy.backup_group = Group.objects.get(name="On call")
policies.save(policy, groups=[Group.objects.get(name="Payments")])
hook = Webhook.objects.create(name="payments-hook", url="{receiver.url}", group=Group.objects.get(name="Payments"))
print(hook.secret)
""").strip().splitlines()[-1]
    app.webhook_secret = secret
    yield app
    app.stop()


@pytest.fixture(scope="module")
def team(browser, team_site):
    people = {name: Reviewer(browser, team_site, name, PASSWORD) for name in PEOPLE}
    yield people
    for person in people.values():
        assert person.errors == [], person.errors
        person.context.close()


def emails_to(site, thread: str) -> set[str]:
    """Who the server's console backend mailed about ``thread`` (its log is the outbox)."""
    told = set()
    for chunk in site.log.read_text().split("-" * 79 + "\n"):
        if "MIME-Version:" not in chunk:
            continue
        message = email.message_from_string(chunk[chunk.index("Content-Type:"):])
        if thread in message.get_payload(decode=True).decode():
            told |= {address.strip() for address in message["To"].split(",")}
    return told


def wait_for(check, what: str, timeout: float = TIMEOUT / 1000):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


def about(delivery: dict) -> dict:
    """The interrupt a webhook delivery is about, from its body."""
    return json.loads(base64.b64decode(delivery["body"]))["interrupt"]


def interrupt_of(site, thread: str) -> dict:
    with site.api() as api:
        [found] = api.get("/api/interrupts/", params={"thread": thread, "status": "all"}).json()["results"]
    return found


def test_a_team_of_three_through_a_day_of_requests(browser, team, team_site, receiver):
    site, alice, bob, carol = team_site, team["alice"], team["bob"], team["carol"]
    bob_inbox = bob.open("/inbox/?agent=janitor")
    # Staff keep the Deliveries page open: each delivery appears there as it is made, without a reload.
    operator = Reviewer(browser, site, "reviewer", "countersign")
    deliveries = operator.open("/webhooks/deliveries/")
    expect(deliveries.get_by_test_id("delivery")).to_have_count(0)

    # 1. A request arrives: one signed webhook, and an email to each eligible reviewer.
    first = interrupt_of(site, start(site, "janitor"))
    expect(bob_inbox.locator(f"#interrupt-{first['id']}")).to_be_visible(timeout=TIMEOUT)
    raised = wait_for(lambda: [r for r in receiver.received("raised") if about(r)["id"] == first["id"]],
                      "the raised webhook")
    assert len(raised) == 1
    assert check_signature(site.webhook_secret, raised[0]["headers"]["Countersign-Signature"],
                           base64.b64decode(raised[0]["body"])) > 0
    expect(deliveries.get_by_test_id("delivery").filter(has_text="raised")).to_have_count(1, timeout=TIMEOUT)
    expect(deliveries.get_by_test_id("delivery").first).to_contain_text("Delivered", timeout=TIMEOUT)
    assert deliveries.locator("[data-live-deliveries]").get_attribute("data-refreshed")
    wait_for(lambda: emails_to(site, first["thread"]), "the emails")
    assert emails_to(site, first["thread"]) == {"alice@example.com", "bob@example.com"}

    # 2. Alice claims it; Bob's inbox, open all along, says so without a reload.
    alice_inbox = alice.open("/inbox/?agent=janitor")
    alice_card = alice_inbox.locator(f"#interrupt-{first['id']}")
    alice_card.get_by_test_id("claim-button").click()
    expect(alice_card.get_by_test_id("claim")).to_have_text(re.compile("You are reviewing"), timeout=TIMEOUT)
    bob_card = bob_inbox.locator(f"#interrupt-{first['id']}")
    expect(bob_card.get_by_test_id("claim")).to_contain_text("Alice is reviewing", timeout=TIMEOUT)
    # Bob opens the card; Alice sees him there.
    bob_card.focus()
    expect(alice_card.get_by_test_id("viewers")).to_contain_text("Bob", timeout=TIMEOUT)

    # 3. Two more; Bob approves every request matching his filter; Alice's claim is skipped, and said so.
    more = [interrupt_of(site, start(site, "janitor")) for _ in range(2)]
    for found in more:
        expect(bob_inbox.locator(f"#interrupt-{found['id']}")).to_be_visible(timeout=TIMEOUT)
    bob_inbox.get_by_test_id("bulk-everything").check()
    bob_inbox.get_by_role("button", name="Approve selected").click()
    report = bob_inbox.get_by_test_id("bulk-result")
    expect(report).to_contain_text("2 approved, 1 skipped", timeout=TIMEOUT)
    expect(report).to_contain_text("Alice is reviewing")
    for found in more:
        wait_for(lambda f=found: interrupt_of(site, f["thread"])["status"] == "resolved", "the bulk approvals")
    assert interrupt_of(site, first["thread"])["status"] == "pending"

    # 4. A request misses its 1 minute target (raised a minute ago, as far as the clock in the database goes).
    late = interrupt_of(site, start(site, "janitor"))
    shell(site, f"""
from datetime import timedelta
from django.utils import timezone
from interrupts.models import Interrupt
Interrupt.objects.filter(pk={late['id']}).update(created_at=timezone.now() - timedelta(seconds=61))
""")
    carol_inbox = carol.open("/inbox/")
    card = carol_inbox.locator(f"#interrupt-{late['id']}")
    expect(card.get_by_test_id("escalated")).to_contain_text("On call", timeout=TIMEOUT)
    expect(card.get_by_test_id("target")).to_have_attribute("data-state", "breached")
    escalated = wait_for(lambda: receiver.received("escalated"), "the escalated webhook")
    assert [about(r)["id"] for r in escalated] == [late["id"]]
    wait_for(lambda: "carol@example.com" in emails_to(site, late["thread"]), "Carol's email")
    card.locator("button[data-key=a]").click()
    wait_for(lambda: interrupt_of(site, late["thread"])["status"] == "resolved", "Carol's approval")
    audit = carol.open("/audit/?agent=janitor")
    expect(audit.get_by_test_id("audit-attention").filter(has_text="escalated to On call")).to_have_count(1)

    # Alice decides the one she claimed.
    alice_inbox = alice.open("/inbox/?agent=janitor")
    alice_inbox.locator(f"#interrupt-{first['id']}").locator("button[data-key=a]").click()
    wait_for(lambda: interrupt_of(site, first["thread"])["status"] == "resolved", "Alice's approval")
    expect(carol.open("/audit/?agent=janitor").get_by_test_id("audit-attention").filter(
        has_text="claimed by alice")).to_have_count(1)

    # 5. The dashboard's time to decision is that of these four decisions, exactly.
    decided = [interrupt_of(site, f["thread"]) for f in [first, *more, late]]
    took = sorted((datetime.fromisoformat(i["closed_at"]) - datetime.fromisoformat(i["created_at"])).total_seconds()
                  for i in decided)
    page = bob.open("/insight/?period=day")
    page.get_by_text("Time to decision as tables").click()
    row = page.get_by_test_id("ttd-table-agent").get_by_test_id("ttd-row").filter(has_text="janitor")
    assert row.locator("td").nth(0).inner_text() == "4"
    assert float(row.locator("td").nth(1).get_attribute("data-seconds")) == nearest_rank(took, 50)
    assert float(row.locator("td").nth(2).get_attribute("data-seconds")) == nearest_rank(took, 95)
    breaches = int(page.get_by_test_id("breaches").inner_text())
    assert breaches >= 1
    bob.screenshot("team-day-insight")
    assert operator.errors == []
    operator.context.close()
