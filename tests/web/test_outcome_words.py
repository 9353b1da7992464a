"""One set of outcome words on every page, reasons in words on the insight page,
forms labelled in words, and a JSON tree that counts its keys in English."""

import pytest
from django.utils import timezone

from interrupts.hub import decisions
from interrupts.reads import selectors

from .. import factories as make


# --- one definition of a decision's words -----------------------------------------------------------------


EDITED = {"approved": True, "editedArgs": {"to": "c"}}
DECIDED = [
    ("approve", {"payload": {"approved": True}}), ("reject", {"payload": {"approved": False}}),
    ("edit", {"payload": EDITED, "edited_args": {"to": "c"}}), ("respond", {"payload": {"year": 2026}}),
    ("cancel", {"status": "cancelled"}),
    # Decisions from before `action` was recorded, read from the answer.
    ("", {"payload": {"approved": False}}), ("", {"payload": {"approved": True}}),
    ("", {"payload": EDITED, "edited_args": {"to": "c"}}), ("", {"payload": {"note": "hi"}}),
    ("", {"status": "cancelled"}),
    # A form whose schema has an `approved` field among others: the audit used to read it its own way.
    ("", {"payload": {"approved": True, "note": "ship it"}}),
]


@pytest.mark.django_db
@pytest.mark.parametrize("action, decided", DECIDED)
def test_the_audit_says_what_the_inbox_and_thread_page_say(action, decided):
    status = decided.get("status", "resolved")
    interrupt = make.interrupt(status="cancelled" if status == "cancelled" else "resolved", closed_at=timezone.now())
    decision = make.decision(interrupt, make.user(), status=status, action=action,
                             payload=decided.get("payload"), edited_args=decided.get("edited_args"))
    [row] = selectors.audit_rows([interrupt])
    assert row.outcome == decisions.outcome_words(decision)


def test_the_words_are_defined_once():
    assert not hasattr(selectors, "OUTCOME_WORDS")


# --- insight: reasons and outcomes in the inbox's words, exports in the machine's ------------------------


@pytest.mark.django_db
def test_insight_says_reasons_and_outcomes_in_words_and_exports_keep_the_raw_ones(client):
    import csv
    import io
    import json
    from datetime import timedelta

    from interrupts.models import Interrupt

    reader = make.user(username="reader-w")
    client.force_login(reader)
    mailer = make.agent(name="mailer-w")
    for reason in ("tool_call", "countersign:deploy"):
        made = make.interrupt(make.run(make.thread(agent=mailer), status="interrupted"), reason=reason)
        make.decision(made, reader, action="approve", payload={"approved": True})
        closed = timezone.now() - timedelta(minutes=5)
        Interrupt.objects.filter(pk=made.pk).update(status="resolved", created_at=closed - timedelta(minutes=2),
                                                    closed_at=closed)
    make.interrupt(make.run(make.thread(agent=mailer), status="interrupted"), reason="tool_call")
    body = client.get("/insight/").content.decode()
    # Chart labels and table rows read as the inbox's cards do; the exact reason stays in the tooltip.
    assert '<text class="chart-label" x="0" y="13">Tool call<title>Tool call (tool_call)</title></text>' in body
    assert "<title>Deploy (countersign:deploy), p50: 2 min (1 decision)</title>" in body
    assert '<th scope="row" title="Tool call (tool_call)">Tool call</th>' in body
    assert '<th scope="row" title="Deploy (countersign:deploy)">Deploy</th>' in body
    assert ">tool_call<" not in body and ">countersign:deploy<" not in body
    # Names are not reasons: shown as they are, with no tooltip of their own.
    assert '<th scope="row">mailer-w</th>' in body
    # The outcomes chart's legend and tooltips in words too.
    assert ">approved 2 (100%)</span>" in body and "<title>approved: 2 of 2 (100%)</title>" in body
    assert ">approve 2" not in body
    rows = list(csv.reader(io.StringIO(client.get("/insight/export.csv").content.decode())))
    assert ["pending_by_reason", "tool_call", "count", "1"] in rows
    assert ["outcomes", "approve", "count", "2"] in rows
    exported = json.loads(client.get("/insight/export.json").content)
    assert {e["reason"] for e in exported["time_to_decision"]["by_reason"]} == {"tool_call", "countersign:deploy"}


# --- the webhook, notification and policy forms: labels in words, no colons, empty choices that say so -----


@pytest.mark.django_db
@pytest.mark.parametrize("url, form, labels, empty", [
    ("/webhooks/", 'data-testid="webhook-form"', ["Name", "URL", "Team", "Policy", "Events", "Active"],
     ["Any team", "Any policy"]),
    ("/policies/add/", 'class="stacked"', ["Name", "Agent", "Reason", "Tool", "Approvals needed",
                                           "Self-approval allowed", "Target time (minutes)",
                                           "Backup group"], ["Every agent"]),
    ("/settings/notifications/", 'data-testid="notification-form"', ["Email me about requests I may decide"], []),
])
def test_forms_label_their_fields_in_words_without_colons(client, url, form, labels, empty):
    import re

    client.force_login(make.user(is_staff=True))
    page = client.get(url).content.decode()
    body = page[page.index(form):]
    body = body[: body.index("</form>")]
    said = [re.sub(r"<[^>]+>", "", text).strip() for text in re.findall(r"<(?:label|legend)[^>]*>(.*?)</(?:label|legend)>",
                                                                        body, re.S)]
    assert said and not [text for text in said if text.endswith(":")], said
    for label in labels:
        assert label in said, (label, said)
    # The raw field names Django makes from the model are gone.
    for raw in ("Url", "Tool name", "Required approvals", "Allow self approval", "Target minutes", "---------"):
        assert raw not in body, raw
    for words in empty:
        assert f">{words}</option>" in body
    # A group of boxes or radios is a fieldset its legend names (Django's as_p gave it a label for nothing).
    assert "<label>" not in body
    if "webhook" in form:
        assert "How the deliveries page names it." in body and "Which events it is sent." in body


# --- a JSON tree counts in English ------------------------------------------------------------------------


@pytest.mark.parametrize("value, said", [
    ({"a": 1}, "{…} 1 key<"), ({"a": 1, "b": 2}, "{…} 2 keys<"), ([1], "[…] 1 item<"), ([1, 2], "[…] 2 items<"),
])
def test_a_json_tree_says_1_key_and_2_keys(value, said):
    from interrupts.web.templatetags.countersign import json_tree

    assert said in str(json_tree(value))
