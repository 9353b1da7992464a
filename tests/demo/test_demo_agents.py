"""The built-in demo agents over real HTTP (a live daphne), every stream validated.

These are the scenarios of the SDK seed's end-to-end suite, plus each demo's
own promise; every stream, first run and resumed run, must pass the official
validator ag-ui-validate with no rule switched off and no warning.
"""

import json
import subprocess
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from interrupts.demo.deployer import APPROVE_DEPLOY
from interrupts.demo.filing import FILING
from interrupts.demo.mailer import SEND_EMAIL_SCHEMA

from ..agui import Streamed, post_run, resume_body


@pytest.fixture
def agent_url(served):
    return lambda name: f"{served.url}/agents/{name}/"


async def start(agent_url, name: str, thread: str = "t1", **body) -> Streamed:
    streamed = await post_run(agent_url(name), {"threadId": thread, "runId": "r1", "messages": [], **body})
    assert streamed.status == 200
    assert streamed.problems() == []
    return streamed


async def resume(agent_url, name: str, first, resume_entries, thread="t1", run_id="r2", **overrides):
    body = {**resume_body(first, thread, run_id, resume_entries), **overrides}
    streamed = await post_run(agent_url(name), body)
    assert streamed.status == 200
    assert streamed.problems() == []
    return streamed


# --- the seed's scenarios, on the deployer ------------------------------------


async def test_a_paused_run_finishes_as_interrupted_with_every_field_intact(agent_url):
    first = await start(agent_url, "deployer")
    assert first.types[0] == "RUN_STARTED"
    assert first.types[-3:] == ["STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert first.last["outcome"]["type"] == "interrupt"
    assert first.interrupts == [
        {
            "id": "approve-deploy",
            "reason": "countersign:deploy",
            "message": "Deploy build 42 to production?",
            "responseSchema": APPROVE_DEPLOY.response_schema,
            "metadata": {"environment": "production", "build": 42},
        }
    ]


async def test_a_resolved_answer_reaches_the_agent_on_a_new_run_in_the_same_thread(agent_url):
    first = await start(agent_url, "deployer", thread="deploy-1")
    second = await resume(
        agent_url,
        "deployer",
        first,
        [{"interruptId": "approve-deploy", "status": "resolved", "payload": {"build": 42}}],
        thread="deploy-1",
        run_id="run-2",
    )
    assert second.events[0] == {**second.events[0], "threadId": "deploy-1", "runId": "run-2"}
    assert "Deployed build 42." in second.said()
    assert second.last["outcome"] == {"type": "success"}
    assert second.snapshot("STATE_SNAPSHOT") == {"deployed": 42}


async def test_cancelled_takes_the_other_branch_and_still_succeeds(agent_url):
    first = await start(agent_url, "deployer")
    second = await resume(agent_url, "deployer", first, [{"interruptId": "approve-deploy", "status": "cancelled"}])
    assert second.said() == ["Left production alone."]
    assert second.last["outcome"] == {"type": "success"}


async def test_an_answer_to_another_interrupt_pauses_again(agent_url):
    first = await start(agent_url, "deployer")
    second = await resume(
        agent_url,
        "deployer",
        first,
        [{"interruptId": "something-else", "status": "resolved", "payload": {"build": 42}}],
    )
    assert second.last["outcome"]["type"] == "interrupt"
    assert [i["id"] for i in second.interrupts] == ["approve-deploy"]


@pytest.mark.parametrize("payload", [{}, {"build": "42"}, {"approved": True}])
async def test_a_resolved_answer_without_a_build_number_fails_with_run_error(agent_url, payload):
    first = await start(agent_url, "deployer")
    second = await resume(
        agent_url, "deployer", first, [{"interruptId": "approve-deploy", "status": "resolved", "payload": payload}]
    )
    assert second.types == ["RUN_STARTED", "RUN_ERROR"]
    assert second.last["code"] == "INVALID_RESUME"
    assert "approve-deploy" in second.last["message"]


# --- planner: two decisions at once ------------------------------------------------


async def test_two_interrupts_at_once_are_both_reported(agent_url):
    first = await start(agent_url, "planner")
    assert [i["id"] for i in first.interrupts] == ["approve-budget", "confirm-date"]


async def test_answering_one_per_request_never_finishes(agent_url):
    first = await start(agent_url, "planner")
    budget = {"interruptId": "approve-budget", "status": "resolved", "payload": {"approved": True}}
    date = {"interruptId": "confirm-date", "status": "resolved", "payload": {"date": "2026-12-01"}}
    after_budget = await resume(agent_url, "planner", first, [budget])
    assert [i["id"] for i in after_budget.interrupts] == ["confirm-date"]
    after_date = await resume(agent_url, "planner", after_budget, [date], run_id="r3")
    # The agent remembers nothing: the budget answered one request ago is open again.
    assert [i["id"] for i in after_date.interrupts] == ["approve-budget"]
    both = await resume(agent_url, "planner", first, [budget, date], run_id="r4")
    assert both.last["outcome"] == {"type": "success"}
    assert both.said() == ["Booked for 2026-12-01."]


async def test_a_declined_budget_books_nothing(agent_url):
    first = await start(agent_url, "planner")
    both = await resume(agent_url, "planner", first, [
        {"interruptId": "approve-budget", "status": "resolved", "payload": {"approved": False}},
        {"interruptId": "confirm-date", "status": "resolved", "payload": {"date": "2026-12-01"}},
    ])
    assert both.said() == ["Not booked."]
    assert both.snapshot("STATE_SNAPSHOT") is None


# --- mailer: tool-bound interrupts ----------------------------------------------------


async def test_the_mailer_proposes_send_email_and_asks_with_approve_with_edits(agent_url):
    first = await start(
        agent_url, "mailer", messages=[{"id": "u1", "role": "user", "content": "Email c@d.com about lunch"}]
    )
    assert first.types[1:4] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    call = first.events[1]
    assert call["toolCallName"] == "sendEmail"
    proposed = json.loads(first.events[2]["delta"])
    assert proposed == {"to": "c@d.com", "subject": "Lunch", "body": "Email c@d.com about lunch"}
    [asked] = first.interrupts
    assert asked["reason"] == "tool_call"
    assert asked["toolCallId"] == call["toolCallId"]
    assert asked["responseSchema"] == SEND_EMAIL_SCHEMA
    assert "editedArgs" in asked["responseSchema"]["properties"]


async def test_approving_with_edits_sends_the_edited_args_as_a_full_replacement(agent_url):
    first = await start(agent_url, "mailer")
    [asked] = first.interrupts
    edited = {"to": "a@b.com", "subject": "Hi", "body": "Hi (revised per my note)"}
    second = await resume(agent_url, "mailer", first, [
        {"interruptId": asked["id"], "status": "resolved", "payload": {"approved": True, "editedArgs": edited}}
    ])
    # Not re-proposed: the result answers the original call, after a snapshot holding it.
    assert "TOOL_CALL_START" not in second.types
    assert second.types[:3] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "TOOL_CALL_RESULT"]
    result = second.events[2]
    assert result["toolCallId"] == asked["toolCallId"]
    assert json.loads(result["content"]) == {"sent": True, **edited}
    assert second.snapshot("STATE_SNAPSHOT")["emails"][asked["toolCallId"]]["sent"] == edited


async def test_edited_args_that_drop_a_field_are_refused_not_merged(agent_url):
    first = await start(agent_url, "mailer")
    [asked] = first.interrupts
    second = await resume(
        agent_url,
        "mailer",
        first,
        [
            {
                "interruptId": asked["id"],
                "status": "resolved",
                "payload": {"approved": True, "editedArgs": {"to": "a@b.com"}},
            }
        ],
    )
    assert second.last["code"] == "INVALID_RESUME"
    assert "TOOL_CALL_RESULT" not in second.types


async def test_a_declined_email_is_never_sent(agent_url):
    first = await start(agent_url, "mailer")
    [asked] = first.interrupts
    second = await resume(agent_url, "mailer", first, [
        {"interruptId": asked["id"], "status": "resolved", "payload": {"approved": False}}
    ])
    assert "TOOL_CALL_RESULT" not in second.types
    assert second.last["outcome"] == {"type": "success"}
    ledger = second.snapshot("STATE_SNAPSHOT")["emails"][asked["toolCallId"]]
    assert ledger["status"] == "declined" and "sent" not in ledger


async def test_approve_two_cancel_one_gives_exactly_two_results(agent_url):
    first = await start(agent_url, "bulk-mailer")
    asked = first.interrupts
    assert len(asked) == 3 and all(i["reason"] == "tool_call" for i in asked)
    second = await resume(agent_url, "bulk-mailer", first, [
        {"interruptId": asked[0]["id"], "status": "resolved", "payload": {"approved": True}},
        {"interruptId": asked[1]["id"], "status": "resolved", "payload": {"approved": True}},
        {"interruptId": asked[2]["id"], "status": "cancelled"},
    ])
    results = [e for e in second.events if e["type"] == "TOOL_CALL_RESULT"]
    assert [r["toolCallId"] for r in results] == [asked[0]["toolCallId"], asked[1]["toolCallId"]]
    assert any("z@w.com" in text and "cancelled" in text for text in second.said())
    emails = second.snapshot("STATE_SNAPSHOT")["emails"]
    assert [emails[i["toolCallId"]]["status"] for i in asked] == ["sent", "sent", "cancelled"]


# --- filing: a form with an expiry ------------------------------------------------------


async def test_the_filing_form_carries_its_schema_and_an_expiry_an_hour_ahead(agent_url):
    before = datetime.now(UTC)
    first = await start(agent_url, "filing")
    [asked] = first.interrupts
    assert asked["reason"] == "input_required"
    assert asked["responseSchema"] == FILING.response_schema
    expires = datetime.fromisoformat(asked["expiresAt"])
    assert before + timedelta(minutes=59) < expires < datetime.now(UTC) + timedelta(minutes=61)


async def test_a_filled_form_is_filed(agent_url):
    first = await start(agent_url, "filing")
    second = await resume(
        agent_url,
        "filing",
        first,
        [
            {
                "interruptId": "quarterly-filing",
                "status": "resolved",
                "payload": {"quarter": "Q1", "year": 2026, "revenue": 4200000},
            }
        ],
    )
    assert second.said() == ["Filed Q1 2026: revenue 4,200,000."]
    assert second.snapshot("STATE_SNAPSHOT")["filed"] == {"quarter": "Q1", "year": 2026, "revenue": 4200000}


async def test_a_form_answered_after_its_expiry_fails_with_expired(agent_url):
    first = await start(agent_url, "filing")
    stale = {**first.snapshot("STATE_SNAPSHOT"), "filingExpiresAt": "2026-04-20T17:00:00Z"}
    second = await resume(
        agent_url,
        "filing",
        first,
        [
            {
                "interruptId": "quarterly-filing",
                "status": "resolved",
                "payload": {"quarter": "Q1", "year": 2026, "revenue": 1},
            }
        ],
        state=stale,
    )
    assert second.types == ["RUN_STARTED", "RUN_ERROR"]
    assert second.last["code"] == "EXPIRED"


async def test_c20_a_form_cancelled_after_its_expiry_is_skipped_and_says_so(agent_url):
    first = await start(agent_url, "filing")
    stale = {**first.snapshot("STATE_SNAPSHOT"), "filingExpiresAt": "2026-04-20T17:00:00Z"}
    second = await resume(agent_url, "filing", first, [{"interruptId": "quarterly-filing", "status": "cancelled"}],
                          state=stale)
    assert second.said() == ["The filing request expired at 2026-04-20T17:00:00Z unanswered: filing skipped."]
    assert second.last["type"] == "RUN_FINISHED"


async def test_a_form_that_breaks_the_schema_fails_with_invalid_resume(agent_url):
    first = await start(agent_url, "filing")
    second = await resume(
        agent_url,
        "filing",
        first,
        [
            {
                "interruptId": "quarterly-filing",
                "status": "resolved",
                "payload": {"quarter": "Q5", "year": 1999, "revenue": 1},
            }
        ],
    )
    assert second.last["code"] == "INVALID_RESUME"


# --- janitor: a yes/no confirmation ---------------------------------------------------------


async def test_the_janitor_asks_for_confirmation_and_clears_on_yes(agent_url):
    first = await start(agent_url, "janitor")
    [asked] = first.interrupts
    assert asked["reason"] == "confirmation"
    assert asked["message"] == ("Clear the board? 3 task(s) will be removed: "
                                "Write release notes, Rotate staging keys, Archive Q3 tickets.")
    yes = await resume(
        agent_url,
        "janitor",
        first,
        [{"interruptId": "confirm-clear", "status": "resolved", "payload": {"confirm": True}}],
    )
    assert yes.snapshot("STATE_SNAPSHOT") == {"tasks": []}
    no = await resume(
        agent_url,
        "janitor",
        first,
        [{"interruptId": "confirm-clear", "status": "resolved", "payload": {"confirm": False}}],
    )
    assert no.said() == ["Kept the board as it was."]
    assert no.snapshot("STATE_SNAPSHOT") is None


# --- what the person typed ---------------------------------------------------------------


def said_by_user(text: str) -> list[dict]:
    return [{"id": "u1", "role": "user", "content": text}]


async def test_the_deployer_asks_about_the_build_and_environment_the_message_names(agent_url):
    first = await start(agent_url, "deployer", messages=said_by_user("Deploy build 812 to staging, please"))
    [asked] = first.interrupts
    assert asked["message"] == "Deploy build 812 to staging?"
    assert asked["metadata"] == {"environment": "staging", "build": 812}
    # The resume carries the thread's messages, the request among them.
    no = await resume(agent_url, "deployer", first, [{"interruptId": "approve-deploy", "status": "cancelled"}])
    assert no.said() == ["Left staging alone."]


async def test_the_mailer_drafts_the_recipient_subject_and_words_the_message_gives(agent_url):
    text = "Send an email to bob@x.org with subject 'Q3 numbers' saying \"The numbers are in.\""
    first = await start(agent_url, "mailer", messages=said_by_user(text))
    assert json.loads(first.events[2]["delta"]) == {"to": "bob@x.org", "subject": "Q3 numbers",
                                                    "body": "The numbers are in."}
    [asked] = first.interrupts
    assert asked["message"] == "Send email to bob@x.org with subject 'Q3 numbers'?"


async def test_the_janitor_asks_about_the_paths_the_message_names(agent_url):
    first = await start(agent_url, "janitor", messages=said_by_user("Clean up /tmp/cache and ~/old-logs."))
    [asked] = first.interrupts
    assert asked["message"] == "Clear the board? 2 task(s) will be removed: /tmp/cache, ~/old-logs."
    yes = await resume(agent_url, "janitor", first,
                       [{"interruptId": "confirm-clear", "status": "resolved", "payload": {"confirm": True}}])
    assert yes.said() == ["Cleared 2 task(s)."]


# --- the endpoint itself -------------------------------------------------------------------


def test_the_readme_curl_shows_a_stream_ending_in_an_interrupt(served):
    done = subprocess.run(
        ["curl", "-sN", "-X", "POST", f"{served.url}/agents/mailer/", "-H", "content-type: application/json",
         "-d", '{"threadId":"t1","runId":"r1","messages":[]}'],
        capture_output=True, text=True, timeout=30, check=True,
    )
    frames = [line.removeprefix("data: ") for line in done.stdout.splitlines() if line.startswith("data: ")]
    last = json.loads(frames[-1])
    assert last["type"] == "RUN_FINISHED" and last["outcome"]["type"] == "interrupt"


@pytest.mark.parametrize(
    "body, code, fragment",
    [
        (b"{not json", "BAD_JSON", "line 1"),
        (b'{"runId": "r1", "messages": []}', "MISSING_FIELD", "threadId"),
        (b'[1, 2]', "NOT_AN_OBJECT", "JSON array"),
        (b'{"threadId": "t", "runId": "r", "messages": [], "resume": [{"interruptId": "x", "status": "approved"}]}',
         "INVALID_FIELD", "resolved"),
    ],
)
def test_a_malformed_body_gets_a_4xx_json_body_naming_the_problem(served, body, code, fragment):
    response = httpx.post(f"{served.url}/agents/mailer/", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["code"] == code
    assert fragment in response.json()["detail"]


def test_other_methods_and_media_types_are_refused_with_json(served):
    got = httpx.get(f"{served.url}/agents/mailer/")
    assert got.status_code == 405 and got.json()["code"] == "METHOD_NOT_ALLOWED"
    form = httpx.post(f"{served.url}/agents/mailer/", data={"threadId": "t"})
    assert form.status_code == 415 and "application/json" in form.json()["detail"]
