"""A card's forms server-side: the word diff, the comment on every action, forms that start from what the agent gave."""

import json
import re

import pytest
from django.urls import reverse

from interrupts.demo.deployer import APPROVE_DEPLOY
from interrupts.demo.filing import FILING
from interrupts.demo.mailer import SEND_EMAIL_SCHEMA
from interrupts.models import Decision
from interrupts.protocol.inert import answer_start, args_form, inert_schema
from interrupts.web import diffs

from .. import factories as make

EVIL = "<script>alert('x')</script>"
MAIL = {"to": "a@b.com", "subject": "Hi", "body": "Hello world, see you at lunch"}


# --- the word diff (web/diffs.py) ------------------------------------------------------

def parts(before, after):
    changed, _ = diffs.rows(before, after)
    return {row.path: (row.kind, row.parts) for row in changed}


def test_a_changed_string_is_diffed_word_by_word():
    shown = parts(MAIL, {**MAIL, "body": "Hello there, see you at dinner"})
    assert shown == {"body": ("changed", [("same", "Hello "), ("del", "world,"), ("ins", "there,"),
                                          ("same", " see you at "), ("del", "lunch"), ("ins", "dinner")])}


def test_neighbouring_changed_words_read_as_one_change_not_a_patchwork():
    assert parts({"a": "one two three"}, {"a": "four five three"})["a"][1] == [
        ("del", "one two"), ("ins", "four five"), ("same", " three")]


def test_paths_added_removed_and_changed_in_type_are_rows_of_their_own():
    shown = parts({"to": "a@b.com", "n": 42, "tags": ["x"], "cc": None},
                  {"to": "a@b.com", "n": "42", "tags": ["x", "y"], "extra": {"k": True}})
    assert shown == {
        "n": ("changed", [("del", "42"), ("ins", '"42"')]),  # a number became a string: quoted, so it reads apart
        "cc": ("removed", [("del", "null")]),
        "tags/1": ("added", [("ins", "y")]),
        "extra/k": ("added", [("ins", "true")]),
    }
    assert diffs.rows({"a": 1}, {"a": 1})[0] == [] and diffs.rows({"a": 1, "b": 2}, {"a": 1})[1] == ["a"]


def test_the_diff_is_escaped_labelled_for_screen_readers_and_says_what_did_not_change():
    html = diffs.render({"body": "Hi", "to": "a@b.com"}, {"body": f"Hi {EVIL}", "to": "a@b.com", EVIL: 1})
    assert EVIL not in html and "&lt;script&gt;" in html
    assert '<ins><span class="sr">added: </span> &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;</ins>' in html
    assert "1 changed, 1 added; unchanged: to." in html
    assert "<table" not in html  # no wrapped line table wider than a phone
    assert "No changes: these are the proposed arguments (to)." in diffs.render({"to": "x"}, {"to": "x"})


def test_long_unchanged_text_shows_its_ends_and_huge_values_are_bounded():
    words = " ".join(f"w{n}" for n in range(200))
    [row] = diffs.rows({"a": words}, {"a": words.replace("w100 ", "CHANGED ")})[0]
    assert [op for op, _ in row.parts] == ["gap", "same", "del", "ins", "same", "gap"]
    assert 'class="diff-gap"' in diffs.render({"a": words}, {"a": words.replace("w100 ", "CHANGED ")})
    big = " ".join(str(n) for n in range(2000))
    [row] = diffs.rows({"a": big}, {"a": big[::-1]})[0]
    assert [op for op, _ in row.parts] == ["del", "ins"]  # too many words to align: old and new whole
    many = {str(n): n for n in range(500)}
    assert "(300 more not shown)" in diffs.render(many, {k: v + 1 for k, v in many.items()})


def test_json_diff_keeps_its_signature_in_templates():
    from django.template import Context, Template

    page = Template("{% load countersign %}{% json_diff a b %}").render(Context({"a": MAIL, "b": {**MAIL, "to": EVIL}}))
    assert 'data-testid="word-diff"' in page and EVIL not in page


# --- forms start from what the agent gave (protocol/inert.py) ---------------------------

def test_the_edit_form_is_the_declared_schema_for_the_proposed_keys_long_text_in_a_textarea():
    form = args_form(SEND_EMAIL_SCHEMA, {**MAIL, "body": "line one\nline two"})
    assert form["properties"] == {"to": {"type": "string", "format": "email"}, "subject": {"type": "string"},
                                  "body": {"type": "string", "format": "textarea"}}
    assert form["required"] == ["to", "subject", "body"]
    # Only the proposed keys: a declared key the proposal lacks is added as JSON, not drawn empty.
    assert set(args_form(SEND_EMAIL_SCHEMA, {"to": "a@b.com"})["properties"]) == {"to"}


def test_undescribed_arguments_get_fields_from_their_shape():
    schema = {"type": "object", "properties": {"approved": {"type": "boolean"}, "editedArgs": {"type": "object"}}}
    form = args_form(schema, {"n": 1, "ratio": 0.5, "on": True, "tags": ["a"], "rows": [{"x": 1}, {"x": 2}],
                              "none": None})
    assert form["properties"] == {
        "n": {"type": "integer"}, "ratio": {"type": "number"}, "on": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}}, "none": {"type": "null"},
        "rows": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"}}}},
    }


@pytest.mark.parametrize("args", [
    {"mixed": [1, "a"]},  # an array of mixed shapes
    {"nested": [[1], ["a"]]},
    {"empty": []},  # no items to learn the shape from
    {"x" * 201: 1},  # a key too long for a label
    {"to": 5},  # outside its declared type
    "not an object",
])
def test_shapes_a_form_cannot_give_back_unchanged_are_edited_as_json(args):
    schema = {
        "type": "object",
        "properties": {"editedArgs": {"type": "object", "properties": {"to": {"type": "string"}}}},
    }
    assert args_form(schema, args) is None


def test_a_choice_or_an_enum_the_proposal_misses_is_edited_as_json():
    def edits(sub):
        return {"type": "object", "properties": {"editedArgs": {"type": "object", "properties": {"v": sub}}}}

    assert args_form(edits({"oneOf": [{"type": "string"}, {"type": "integer"}]}), {"v": "a"}) is None
    assert args_form(edits({"enum": ["a", "b"]}), {"v": "c"}) is None
    assert args_form(edits({"enum": [1, 2]}), {"v": True}) is None  # true is not 1
    assert args_form(edits({"enum": ["a", "b"]}), {"v": "b"})["properties"]["v"] == {
        "enum": ["a", "b"],
        "type": "string",
    }


def test_an_approval_form_starts_from_the_agents_request_and_an_input_form_from_nothing():
    deploy = inert_schema(APPROVE_DEPLOY.response_schema)
    assert answer_start(deploy, None, {"environment": "production", "build": 42}) == {"build": 42}
    assert answer_start(deploy, {"build": 7}, {"build": 42}) == {"build": 7}  # the proposed args first
    for wrong in ("42", 0, True, None, [42]):  # another type, below the minimum, not a scalar
        assert answer_start(deploy, None, {"build": wrong}) is None
    with_default = inert_schema({"type": "object", "properties": {"n": {"type": "integer", "default": 3}}})
    assert answer_start(with_default, None, {"n": 5}) is None  # json-editor applies the default itself
    assert answer_start(inert_schema(FILING.response_schema), None, None) is None


# --- the card ----------------------------------------------------------------------------

@pytest.fixture
def reviewer(client, db):
    user = make.user(first_name="Rita", is_staff=True)
    client.force_login(user)
    return user


def card_of(client, interrupt):
    make.every_card_whole(client)
    page = client.get(reverse("inbox"), {"scope": "all"}).content.decode()
    start = page.index(f'id="interrupt-{interrupt.pk}"')
    return page[start:page.index("</article>", start)]


def test_buttons_show_their_keys_and_say_what_they_do_without_a_help_sentence(client, reviewer):
    interrupt = make.interrupt(
        reason="tool_call", tool_call_id="tc-1", proposed_args=MAIL, response_schema=SEND_EMAIL_SCHEMA
    )
    card = card_of(client, interrupt)
    for word, key in (("Approve", "a"), ("Reject", "r"), ("Dismiss", "d"), ("Edit &amp; approve", "e")):
        assert re.search(rf'aria-keyshortcuts="{key}"[^>]*>{word} <kbd aria-hidden="true">{key}</kbd>', card), word
    assert "declines without an answer" not in card and 'data-testid="decide-help"' not in card
    # One comment box, in the form that sends approve, reject and cancel;
    # the edit form has its own only without scripts.
    assert card.count("data-comment") == 1
    assert re.search(r"<noscript><label[^>]*>Comment \(optional\) <input[^>]*name=\"comment\"", card)
    assert 'data-schema="' in card and "&quot;format&quot;: &quot;email&quot;" in card  # a field per argument


def test_the_deployer_asks_to_approve_its_build_and_the_filing_form_starts_empty(client, reviewer):
    deploy = make.interrupt(reason="countersign:deploy", response_schema=APPROVE_DEPLOY.response_schema,
                            metadata={"environment": "production", "build": 42})
    card = card_of(client, deploy)
    assert re.search(r'value="respond" data-key="a"[^>]*>Approve <kbd', card)
    assert 'data-start="{&quot;build&quot;: 42}"' in card and 'data-testid="prefilled"' in card
    filing = make.interrupt(reason="input_required", response_schema=FILING.response_schema)
    card = card_of(client, filing)
    assert re.search(r'value="respond" data-key="a"[^>]*>Send answer <kbd', card)
    assert "data-start" not in card and ">{}</textarea>" in card


def decide(client, interrupt, **data):
    return client.post(reverse("decide", args=[interrupt.pk]), data, HTTP_HX_REQUEST="true",
                       HTTP_HX_TARGET=f"batch-{interrupt.run_id}")


@pytest.mark.parametrize("action, extra, status", [
    ("approve", {}, "resolved"),
    ("reject", {}, "resolved"),
    ("cancel", {"payload": "{not json"}, "cancelled"),  # an answer half-typed beside it does not refuse a cancel
    ("respond", {"payload": '{"quarter": "Q1", "year": 2026, "revenue": 1.5}'}, "resolved"),
    ("edit", {"edited_args": json.dumps({**MAIL, "body": "edited"})}, "resolved"),
])
def test_the_comment_is_recorded_whichever_action_sends_it(client, reviewer, action, extra, status):
    schema = FILING.response_schema if action == "respond" else SEND_EMAIL_SCHEMA
    interrupt = make.interrupt(reason="input_required" if action == "respond" else "tool_call", tool_call_id="tc-1",
                               proposed_args=MAIL, response_schema=schema)
    response = decide(client, interrupt, action=action, comment=f"why: {action}", **extra)
    assert response.status_code == 200 and 'data-testid="card-error"' not in response.content.decode()
    decision = Decision.objects.get(interrupt=interrupt)
    assert (decision.action, decision.status, decision.comment) == (action, status, f"why: {action}")


def test_without_javascript_the_edit_preview_is_a_page_that_carries_the_comment(client, reviewer):
    interrupt = make.interrupt(
        reason="tool_call", tool_call_id="tc-1", proposed_args=MAIL, response_schema=SEND_EMAIL_SCHEMA
    )
    url = reverse("edit-preview", args=[interrupt.pk])
    page = client.post(url, {"edited_args": json.dumps({**MAIL, "to": "c@d.com"}), "comment": "new address",
                             "next": "/inbox/?q=x"}).content.decode()
    assert "Review your edits · Countersign</title>" in page and 'data-testid="edit-diff"' in page
    assert 'name="comment" value="new address"' in page and 'name="next" value="/inbox/?q=x"' in page
    # What was typed comes back with the reason it does not fit.
    refused = client.post(url, {"edited_args": '{"to": "nope"', "comment": "kept"}).content.decode()
    assert 'data-testid="preview-error"' in refused and '>{&quot;to&quot;: &quot;nope&quot;</textarea>' in refused
    assert 'value="kept"' in refused
    # In a card (htmx) the card's own comment box goes with it: none in the fragment.
    fragment = client.post(url, {"edited_args": json.dumps(MAIL)}, HTTP_HX_REQUEST="true").content.decode()
    assert "<title>" not in fragment and 'name="comment"' not in fragment and "data-carries-comment" in fragment
    # And the final click records it.
    client.post(reverse("decide", args=[interrupt.pk]), {"action": "edit", "comment": "new address",
                                                          "edited_args": json.dumps({**MAIL, "to": "c@d.com"})})
    assert Decision.objects.get(interrupt=interrupt).comment == "new address"
