"""Proof the reviewer looked: what the card reported goes with the decision into the trail, is checked against
the card, counts on the insight page, and a policy can make long args be opened before Approve."""

import json
import re

import pytest
from django.urls import reverse

from interrupts.demo.mailer import SEND_EMAIL_SCHEMA
from interrupts.hub.trail import verify
from interrupts.models import AuditEntry, Decision, Interrupt
from interrupts.reads import insight
from interrupts.rules import looked

from .. import factories as make

pytestmark = pytest.mark.django_db

SHORT = {"to": "a@b.com", "subject": "Hi", "body": "See you at lunch"}
LONG = {**SHORT, "body": "A long letter. " * 60}


@pytest.fixture
def reviewer(client):
    user = make.user(first_name="Rita")
    client.force_login(user)
    return user


def call(args=SHORT, agent=None) -> Interrupt:
    run = make.run(make.thread(agent=agent) if agent else None, status="interrupted")
    return make.interrupt(run, reason="tool_call", tool_call_id="tc-1", tool_name="sendEmail", proposed_args=args,
                          response_schema=SEND_EMAIL_SCHEMA)


def report(interrupt, opened=(), seconds=12.5, shown=None) -> str:
    return json.dumps({"opened": list(opened), "seconds": seconds, "shown": shown or looked.shown_digest(interrupt)})


def decide(client, interrupt, **data):
    return client.post(reverse("decide", args=[interrupt.pk]), data, HTTP_HX_REQUEST="true",
                       HTTP_HX_TARGET=f"batch-{interrupt.run_id}")


def card_of(client, interrupt) -> str:
    page = client.get(reverse("inbox"), {"scope": "all"}).content.decode()
    start = page.index(f'id="interrupt-{interrupt.pk}"')
    return page[start:page.index("</article>", start)]


def test_the_card_says_what_it_shows_and_the_decision_keeps_what_it_reported_in_the_trail(client, reviewer):
    interrupt = call()
    card = card_of(client, interrupt)
    assert f'data-shown="{looked.shown_digest(interrupt)}"' in card
    assert 'data-looked-part="args"' in card
    decide(client, interrupt, action="approve", looked=report(interrupt, opened=["args"]))
    decision = Decision.objects.get()
    assert decision.looked == {"opened": ["args"], "seconds": 12.5, "shown": looked.shown_digest(interrupt)}
    entry = json.loads(AuditEntry.objects.get(kind="decision").content)["data"]
    assert entry["looked"] == decision.looked
    assert verify.verify(save=False).ok


def test_without_a_script_nothing_is_claimed(client, reviewer):
    interrupt = call()
    decide(client, interrupt, action="approve")
    assert Decision.objects.get().looked is None


@pytest.mark.parametrize("bad, says", [
    ("{not json", "not JSON"),
    (json.dumps({"opened": ["everything"], "seconds": 1, "shown": "x"}), "parts of the card"),
    (json.dumps({"opened": [], "seconds": -4, "shown": "x"}), "seconds"),
    (json.dumps({"opened": [], "seconds": 3, "shown": "sha256:" + "0" * 64}), "not this request"),
])
def test_a_report_that_does_not_fit_the_card_is_refused_and_nothing_is_decided(client, reviewer, bad, says):
    interrupt = call()
    response = decide(client, interrupt, action="approve", looked=bad)
    assert 'data-testid="card-error"' in response.content.decode() and says in response.content.decode()
    assert not Decision.objects.exists()


def test_a_policy_makes_long_args_be_opened_before_approving(client, reviewer):
    agent = make.agent(name="writer")
    make.policy(agent=agent, require_look=True)
    long, short = call(LONG, agent), call(SHORT, agent)
    card = card_of(client, long)
    assert "data-look-first" in card and 'data-testid="look-first"' in card
    assert "data-look-first" not in card_of(client, short)  # short args: read at a glance
    refused = decide(client, long, action="approve", looked=report(long, opened=["metadata"]))
    assert "LOOK_FIRST" in refused.content.decode() or "open the full args" in refused.content.decode()
    assert not Decision.objects.filter(interrupt=long).exists()
    assert decide(client, long, action="reject").status_code == 200  # saying no needs no reading
    assert Decision.objects.get(interrupt=long).action == "reject"
    decide(client, short, action="approve")
    assert Decision.objects.get(interrupt=short).action == "approve"


def test_a_policy_s_look_first_is_met_by_opening_the_args(client, reviewer):
    agent = make.agent(name="writer")
    make.policy(agent=agent, require_look=True)
    long = call(LONG, agent)
    decide(client, long, action="approve", looked=report(long, opened=["args"]))
    assert Decision.objects.get(interrupt=long).looked["opened"] == ["args"]


def test_insight_shows_approvals_made_without_opening_by_agent_and_by_person_only_when_chosen(client, reviewer,
                                                                                                  settings):
    agent = make.agent(name="writer")
    for opened in ([], [], ["args"]):
        interrupt = call(SHORT, agent)
        decide(client, interrupt, action="approve", looked=report(interrupt, opened=opened, seconds=4))
    decide(client, call(SHORT, agent), action="approve")  # reported nothing: not counted either way
    found = insight.figures("day")["looked"]
    [writer] = found["by_agent"]
    assert (writer["approvals"], writer["unopened"], round(writer["unopened_share"], 2)) == (3, 2, 0.67)
    assert writer["median_seconds"] == 4.0
    assert found["by_reviewer"] == [] and found["by_reviewer_shown"] is False
    page = client.get(reverse("insight"), {"period": "day"}).content.decode()
    assert re.search(r'data-testid="looked-overall"><strong>67%</strong> of 3 approvals', page)
    assert 'data-testid="looked-by-reviewer"' not in page
    settings.COUNTERSIGN_INSIGHT_LOOKED_BY_REVIEWER = True
    assert [e["reviewer"] for e in insight.figures("day")["looked"]["by_reviewer"]] == [reviewer.username]


def test_edit_and_approve_s_final_form_asks_for_the_passkey_where_policy_does(client, reviewer):
    agent = make.agent(name="keyed")
    make.policy(agent=agent, require_passkey=True)
    keyed, plain = call(SHORT, agent), call(SHORT)
    for interrupt, asks in ((keyed, True), (plain, False)):
        preview = client.post(reverse("edit-preview", args=[interrupt.pk]),
                              {"edited_args": json.dumps({**SHORT, "subject": "Hello"})}, HTTP_HX_REQUEST="true")
        assert ("data-passkey=" in preview.content.decode()) is asks
