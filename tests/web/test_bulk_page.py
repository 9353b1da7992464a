"""The inbox's bulk form without JavaScript: what it decides, what it skips and says why, what it refuses."""

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from interrupts.conf import MAX_BULK_DECISIONS
from interrupts.hub import claims, decisions
from interrupts.models import Decision, Interrupt, Run

from .. import factories as make

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


def asking(agent, count=1):
    run = make.run(make.thread(agent=agent), status="interrupted")
    return [make.interrupt(run, interrupt_id=f"ask-{run.pk}-{n}", response_schema=SCHEMA,
                           raw={"id": f"ask-{run.pk}-{n}", "reason": "confirmation", "responseSchema": SCHEMA})
            for n in range(count)]


@pytest.fixture
def reviewer(client):
    user = make.user(first_name="Rita")
    client.force_login(user)
    return user


def said(response):
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_the_inbox_offers_a_checkbox_on_each_card_the_reader_may_decide(client, reviewer):
    agent = make.agent()
    [mine] = asking(agent)
    restricted = make.agent()
    [theirs] = asking(restricted)
    make.policy(agent=restricted, users=[make.user()], restricted=True)
    page = client.get(reverse("inbox"), {"scope": "all"}).content.decode()
    assert f'name="ids" value="{mine.pk}" form="bulk"' in page
    assert f'value="{theirs.pk}" form="bulk"' not in page  # read-only for this reader: nothing to tick
    # The filter shown rides in the form's address, for "all matching this filter".
    assert 'action="/interrupts/bulk-decide/?scope=all"' in page


def test_ticked_cards_are_decided_and_a_card_decided_meanwhile_is_skipped_with_who_decided(client, reviewer):
    agent = make.agent()
    pair = asking(agent, 2)
    [gone] = asking(agent)
    decisions.decide(gone, make.user(first_name="Alice"), "resolved", {"approved": True})
    response = client.post(reverse("bulk-decide"), {"action": "approve", "comment": "fine",
                                                    "ids": [pair[0].pk, pair[1].pk, gone.pk]})
    assert response.status_code == 302 and response["Location"] == reverse("inbox")
    messages = said(response)
    assert messages[0] == "2 approved, 1 skipped"
    assert messages[1].startswith(f"Skipped {gone.interrupt_id}: Interrupt {gone.interrupt_id} was already "
                                  "decided by Alice")
    assert set(Decision.objects.filter(user=reviewer).values_list("comment", flat=True)) == {"fine"}
    # The pair is one batch: resumed once, with both answers.
    [resume] = Run.objects.filter(parent_id=pair[0].run_id, resume_key__isnull=False)
    assert len(resume.input["resume"]) == 2


def test_everything_matching_the_inbox_filter_is_decided_and_nothing_else(client, reviewer):
    wanted, other = make.agent(name="wanted"), make.agent(name="other")
    chosen = asking(wanted) + asking(wanted)
    [untouched] = asking(other)
    response = client.post(reverse("bulk-decide") + "?agent=wanted", {"action": "cancel", "everything": "1",
                                                                      "ids": [untouched.pk]})
    assert response.status_code == 302 and response["Location"] == reverse("inbox") + "?agent=wanted"
    assert said(response) == ["2 dismissed"]
    assert set(Interrupt.objects.filter(pk__in=[i.pk for i in chosen]).values_list("status", flat=True)) == {
        "cancelled"}
    assert Interrupt.objects.get(pk=untouched.pk).status == "pending"


def test_the_page_s_script_gets_the_summary_in_place_with_each_reason_in_words(client, reviewer):
    [ask] = asking(make.agent())
    response = client.post(reverse("bulk-decide"), {"action": "approve", "ids": [ask.pk, 2**40]},
                           HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    page = response.content.decode()
    assert "1 approved, 1 skipped" in page
    assert f"No interrupt {2**40}: it was removed." in page and 'data-code="NOT_FOUND"' in page


def test_a_card_a_colleague_claimed_is_skipped_unless_confirmed(client, reviewer):
    [ask] = asking(make.agent())
    claims.claim(ask, make.user(first_name="Alice"))
    response = client.post(reverse("bulk-decide"), {"action": "approve", "ids": [ask.pk]}, HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert "0 approved, 1 skipped" in page and f"<code>{ask.interrupt_id}</code>" in page
    assert f"Alice is reviewing interrupt {ask.interrupt_id}" in page  # the reason in words
    assert Interrupt.objects.get(pk=ask.pk).status == "pending"
    response = client.post(reverse("bulk-decide"), {"action": "approve", "ids": [ask.pk], "confirm_claim": "1"})
    assert said(response) == ["1 approved"]
    assert Interrupt.objects.get(pk=ask.pk).status == "resolved"


@pytest.mark.parametrize("data, problem", [
    ({"action": "approve"}, "Select at least one card, or all matching this filter, first."),
    ({"action": "launch", "ids": ["1"]}, "A bulk decision is approve, reject or cancel, not launch"),
    ({"ids": ["1"]}, "Pick what to do with the selected cards"),
    ({"action": "approve", "ids": ["one"]}, "'one' is not a card's id."),
    ({"action": "approve", "ids": [str(2**64)]}, f"{2**64} is not a card's id."),
    ({"action": "approve", "ids": [str(n) for n in range(1, MAX_BULK_DECISIONS + 2)]},
     f"One bulk decision takes at most {MAX_BULK_DECISIONS} cards; {MAX_BULK_DECISIONS + 1} were selected."),
])
def test_a_form_it_cannot_act_on_gets_a_clear_error_never_a_500(client, reviewer, data, problem):
    [ask] = asking(make.agent())
    response = client.post(reverse("bulk-decide"), data)
    assert response.status_code == 302
    assert problem in said(response)[0]
    scripted = client.post(reverse("bulk-decide"), data, HTTP_HX_REQUEST="true")
    assert scripted.status_code == 400 and problem in scripted.content.decode().replace("&#x27;", "'")
    assert Interrupt.objects.get(pk=ask.pk).status == "pending"


def test_a_post_without_the_csrf_token_is_refused():
    [ask] = asking(make.agent())
    client = Client(enforce_csrf_checks=True)
    client.force_login(make.user())
    response = client.post(reverse("bulk-decide"), {"action": "approve", "ids": [ask.pk]})
    assert response.status_code == 403
    assert Interrupt.objects.get(pk=ask.pk).status == "pending"
    # With the token the inbox's form carries, the same post goes through.
    page = client.get(reverse("inbox")).content.decode()
    token = page.split('name="csrfmiddlewaretoken" value="', 1)[1].split('"', 1)[0]
    response = client.post(reverse("bulk-decide"), {"action": "approve", "ids": [ask.pk],
                                                    "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert Interrupt.objects.get(pk=ask.pk).status == "resolved"
