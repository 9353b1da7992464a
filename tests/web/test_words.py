"""Words for people: a reason as a label, a moment as "2 min ago", an audit row's outcome and
comment (on the page and in both exports), long JSON blocks a keyboard can reach, one set of outcome
words on every page, forms labelled in words, and a JSON tree that counts its keys in English."""

import csv
import io
import json
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from interrupts.reads import selectors
from interrupts.rules.words import outcome_words
from interrupts.web.templatetags.countersign import (
    ago,
    args_fields,
    from_now,
    json_brief,
    json_highlight,
    reason_words,
)

from .. import factories as make


@pytest.mark.parametrize("reason, words", [
    ("tool_call", "Tool call"), ("TOOL_CALL", "Tool call"), ("countersign:deploy", "Deploy"),
    ("COUNTERSIGN:DEPLOY", "Deploy"), ("input_required", "Input required"), ("confirmation", "Confirmation"),
    ("acme/refundRequest", "Refund request"), ("com.acme:deploy-to-prod", "Deploy to prod"), ("", "Request"),
    ("  ", "Request"), (None, "Request"),
])
def test_a_reason_reads_as_words(reason, words):
    assert reason_words(reason) == words


def test_a_reason_is_cut_to_a_label_and_stays_text():
    long = reason_words("x" * 500)
    assert len(long) == 40 and long.endswith("…")
    # Only re-spaced: the template escapes it like any agent text (no mark_safe here).
    assert reason_words("<b>bold") == "<b>bold" and not hasattr(reason_words("<b>"), "__html__")


@pytest.mark.parametrize("seconds, said", [
    (0, "just now"), (44, "just now"), (50, "1 min ago"), (130, "2 min ago"), (3599, "59 min ago"),
    (3600, "1 h ago"), (3700, "1 h 1 min ago"), (3 * 3600 + 100, "3 h ago"), (25 * 3600, "1 d ago"),
    (10 * 86400, "10 d ago"),
])
def test_a_moment_reads_as_how_long_ago(seconds, said):
    now = timezone.now()
    assert ago(now - timedelta(seconds=seconds), now) == said


@pytest.mark.parametrize("seconds, said", [
    (-5, "now"), (0, "now"), (30, "in under a minute"), (300, "in 5 min"), (2 * 3600, "in 2 h"), (3 * 86400, "in 3 d"),
])
def test_a_deadline_reads_as_how_long_until(seconds, said):
    now = timezone.now()
    assert from_now(now + timedelta(seconds=seconds), now) == said


def test_ago_without_a_moment_says_nothing():
    assert ago(None) == "" and from_now(None) == ""


def test_only_a_long_json_block_scrolls_and_it_is_reachable_by_keyboard():
    short = str(json_highlight({"to": "a@b.com"}))
    assert "<pre>" in short and "tabindex" not in short
    long = str(json_highlight({f"key{n}": n for n in range(40)}))
    assert '<pre tabindex="0" role="region" aria-label="JSON, scrolls">' in long
    # The content never makes a second one: it is escaped by Pygments.
    hostile = str(json_highlight({"x": "<pre>" * 3, **{f"k{n}": n for n in range(40)}}))
    assert hostile.count("<pre") == 1 and "&lt;pre&gt;" in hostile


def test_short_args_read_on_one_line_long_ones_indented():
    brief = str(json_brief({"to": "a@b.com", "subject": "Hi"}))
    assert "\n" not in brief.split("<pre>", 1)[1].split("</pre>")[0].strip()
    assert str(json_brief({"body": "x" * 500})).count("\n") > 2
    assert "&lt;script&gt;" in str(json_brief({"x": "<script>"}))


# --- the audit trail's outcome in words, and its comment ------------------------------------------------


def _closed(reviewer, *, action, status="resolved", payload=None, edited_args=None, comment=""):
    interrupt = make.interrupt(
        reason="tool_call",
        tool_call_id="tc-1",
        tool_name="sendEmail",
        proposed_args={"to": "a@b.com"},
        status="cancelled" if status == "cancelled" else "resolved",
        closed_at=timezone.now(),
    )
    make.decision(interrupt, reviewer, status=status, action=action, payload=payload, edited_args=edited_args,
                  comment=comment)
    return interrupt


CASES = [
    ({"action": "approve", "payload": {"approved": True}}, "Approved"),
    ({"action": "reject", "payload": {"approved": False}, "comment": "wrong list"}, "Rejected"),
    (
        {
            "action": "edit",
            "payload": {"approved": True, "editedArgs": {"to": "c@d.com"}},
            "edited_args": {"to": "c@d.com"},
        },
        "Approved with edits",
    ),
    ({"action": "respond", "payload": {"year": 2026}}, "Answered"),
    ({"action": "cancel", "status": "cancelled"}, "Dismissed"),
    ({"action": "reject", "status": "cancelled"}, "Rejected"),  # a request with no yes/no field, rejected
    # Decisions from before `action` was recorded: read from the answer.
    ({"action": "", "payload": {"approved": False}}, "Rejected"),
    ({"action": "", "payload": {"approved": True}}, "Approved"),
    (
        {"action": "", "payload": {"approved": True, "editedArgs": {"to": "c"}}, "edited_args": {"to": "c"}},
        "Approved with edits",
    ),
    ({"action": "", "payload": {"note": "hi"}}, "Answered"),
    ({"action": "", "status": "cancelled"}, "Dismissed"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("decided, words", CASES)
def test_an_audit_row_says_its_outcome_in_words(decided, words):
    interrupt = _closed(make.user(), **decided)
    [row] = selectors.audit_rows([interrupt])
    assert row.outcome == words
    assert row.as_dict()["outcome"] == words


@pytest.mark.django_db
def test_expired_and_closed_without_a_decision():
    expired = make.interrupt(status="expired", closed_at=timezone.now(), closed_reason="expired at its expiresAt")
    stopped = make.interrupt(status="cancelled", closed_at=timezone.now(), closed_reason="run cancelled by operator")
    rows = {row.interrupt.pk: row for row in selectors.audit_rows([expired, stopped])}
    assert (rows[expired.pk].outcome, rows[stopped.pk].outcome) == ("Expired", "Closed")
    assert rows[expired.pk].as_dict()["comment"] == ""


@pytest.fixture
def staff(client):
    user = make.user(first_name="Rita", is_staff=True)
    client.force_login(user)
    return user


@pytest.mark.django_db
def test_the_audit_page_reads_rejected_and_the_comment_not_the_payload(client, staff):
    _closed(staff, action="reject", payload={"approved": False}, comment="Wrong recipient")
    page = client.get(reverse("audit")).content.decode()
    assert 'data-testid="audit-outcome">Rejected<' in page
    assert "Wrong recipient" in page
    assert "&quot;approved&quot;" not in page and '"approved"' not in page and ">resolved<" not in page


@pytest.mark.django_db
def test_both_exports_gain_outcome_and_comment_and_keep_their_columns(client, staff):
    _closed(staff, action="reject", payload={"approved": False}, comment="=HYPERLINK(\"x\") wrong list")
    [row] = json.loads(b"".join(client.get(reverse("audit"), {"format": "json"}).streaming_content))
    assert (row["outcome"], row["comment"]) == ("Rejected", '=HYPERLINK("x") wrong list')
    assert row["status"] == "resolved" and row["payload"] == {"approved": False}  # the machine's columns stay
    text = b"".join(client.get(reverse("audit"), {"format": "csv"}).streaming_content).decode()
    reader = csv.DictReader(io.StringIO(text))
    [record] = list(reader)
    assert reader.fieldnames[:3] == ["thread", "agent", "interruptedRun"]
    assert reader.fieldnames[-3:] == ["outcome", "comment", "auditHead"]
    assert record["outcome"] == "Rejected"
    # A spreadsheet must not run a reviewer's comment as a formula either.
    assert record["comment"].startswith("'=")


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
    assert row.outcome == outcome_words(decision)


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
    said = [
        re.sub(r"<[^>]+>", "", text).strip()
        for text in re.findall(r"<(?:label|legend)[^>]*>(.*?)</(?:label|legend)>", body, re.S)
    ]
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


def test_args_read_as_labelled_fields_with_text_as_text_and_the_json_one_click_away():
    shown = str(args_fields({"to": "c@d.com", "subject": "<b>Hi</b>", "body": "Line one\nline two",
                             "dueDate": None, "urgent": True, "copies": 2, "cc": ["a@b.com"]}))
    labels = re.findall(r'<dt title="([^"]+)">([^<]+)</dt>', shown)
    assert labels == [("to", "To"), ("subject", "Subject"), ("body", "Body"), ("dueDate", "Due date"),
                      ("urgent", "Urgent"), ("copies", "Copies"), ("cc", "Cc")]
    assert "<dt title=\"imageURL\">Image URL</dt>" in str(args_fields({"imageURL": "x"}))  # as the edit form says it
    assert '<dd class="arg-text">Line one\nline two</dd>' in shown  # not "Line one\\nline two"
    assert '<dd class="arg-text">&lt;b&gt;Hi&lt;/b&gt;</dd>' in shown and "<b>Hi" not in shown
    assert '<dd class="arg-plain">yes</dd>' in shown and '<dd class="arg-plain muted">(none)</dd>' in shown
    assert '<details class="as-json" data-looked-part="args"><summary>as JSON</summary>' in shown


@pytest.mark.parametrize("value", [["a", "b"], "text", {}, {f"k{n}": n for n in range(21)}, {"two words": 1},
                                   {"<img src=x>": 1}])
def test_args_that_are_not_a_few_named_fields_stay_json(value):
    shown = str(args_fields(value))
    assert 'data-testid="args"' not in shown and shown == str(json_brief(value))
