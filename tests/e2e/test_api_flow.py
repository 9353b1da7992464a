"""The hub through its REST API, against the demo agents served by a live daphne."""

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx

from ..agui import answers
from ..servers import ROOT
from .conftest import events, finished_run, pending, start, wait_for


def interrupts_of(api, thread_id, count=1):
    return wait_for(lambda: len(found := pending(api, thread_id)) == count and found)


def decide(api, interrupt, **body):
    return api.post(f"/api/interrupts/{interrupt['id']}/decide/", json=body)


def resumed_run(api, interrupt):
    detail = wait_for(lambda: (d := api.get(f"/api/interrupts/{interrupt['id']}/").json())["resumed_by"] and d)
    return finished_run(api, detail["resumed_by"])


def tool_results(api, thread_id, run_id):
    return [e["payload"] for e in events(api, thread_id) if e["type"] == "TOOL_CALL_RESULT" and e["run"] == run_id]


def test_a_newcomer_approves_an_email_with_edits_and_reads_the_result(api):
    run = start(api, "mailer", "Email c@d.com about lunch")
    thread = run["thread"]
    assert finished_run(api, run["run_id"])["status"] == "interrupted"
    [asked] = interrupts_of(api, thread)
    assert asked["reason"] == "tool_call" and asked["supports_edits"] is True
    assert asked["tool_name"] == "sendEmail"
    assert asked["proposed_args"] == {"to": "c@d.com", "subject": "Lunch", "body": "Email c@d.com about lunch"}

    edited = {"to": "c@d.com", "subject": "Lunch", "body": "Tuesday at noon?"}
    answer = decide(api, asked, action="edit", edited_args=edited)
    assert answer.status_code == 201, answer.text
    assert answer.json()["edited_args"] == edited

    resumed = resumed_run(api, asked)
    assert resumed["status"] == "succeeded"
    assert resumed["parent"] == run["run_id"]
    assert answers(resumed["input"]["resume"]) == [
        {
            "interruptId": asked["interrupt_id"],
            "status": "resolved",
            "payload": {"approved": True, "editedArgs": edited},
        }
    ]
    [result] = tool_results(api, thread, resumed["run_id"])
    assert result["toolCallId"] == asked["tool_call_id"]
    assert json.loads(result["content"]) == {"sent": True, **edited}


def test_the_input_carries_the_threads_snapshots_and_the_new_message(api):
    first = start(api, "janitor")
    finished_run(api, first["run_id"])
    [asked] = interrupts_of(api, first["thread"])
    assert decide(api, asked, action="reject").status_code == 201
    resumed = resumed_run(api, asked)
    assert resumed["input"]["state"] == {"tasks": ["Write release notes", "Rotate staging keys", "Archive Q3 tickets"]}
    again = api.post(f"/api/threads/{first['thread']}/runs/", json={"message": "again please"})
    assert again.status_code == 201, again.text
    body = again.json()["input"]
    assert body["threadId"] == first["thread"] and body["runId"] != first["run_id"]
    assert body["messages"][-1] == {**body["messages"][-1], "role": "user", "content": "again please"}
    assert body["tools"] == [] and body["context"] == [] and body["forwardedProps"] == {}
    assert "resume" not in body and "parentRunId" not in body


def test_rejecting_never_sends_the_email(api):
    run = start(api, "mailer")
    [asked] = interrupts_of(api, run["thread"])
    assert decide(api, asked, action="reject").json()["payload"] == {"approved": False}
    resumed = resumed_run(api, asked)
    assert resumed["status"] == "succeeded"
    assert tool_results(api, run["thread"], resumed["run_id"]) == []
    state = api.get(f"/api/threads/{run['thread']}/").json()["state"]
    assert state["emails"][asked["tool_call_id"]]["status"] == "declined"


def test_cancel_sends_a_cancelled_entry_without_payload(api):
    run = start(api, "deployer")
    [asked] = interrupts_of(api, run["thread"])
    assert asked["reason"] == "countersign:deploy"
    answer = decide(api, asked, action="cancel", comment="not today")
    assert answer.json()["status"] == "cancelled" and answer.json()["payload"] is None
    resumed = resumed_run(api, asked)
    assert answers(resumed["input"]["resume"]) == [{"interruptId": "approve-deploy", "status": "cancelled"}]
    said = [e["payload"]["delta"] for e in events(api, run["thread"]) if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert said[-1] == "Left production alone."


def test_parallel_interrupts_resume_once_when_the_last_is_decided(api):
    run = start(api, "bulk-mailer")
    asked = interrupts_of(api, run["thread"], count=3)
    assert decide(api, asked[0], action="approve").status_code == 201
    assert decide(api, asked[1], action="approve").status_code == 201
    # Two of three decided: nothing is sent yet, and the batch still blocks new input.
    assert api.get(f"/api/interrupts/{asked[0]['id']}/").json()["resumed_by"] is None
    blocked = api.post(f"/api/threads/{run['thread']}/runs/", json={"message": "hello?"})
    assert blocked.status_code == 409 and blocked.json()["code"] == "PENDING_INTERRUPTS"
    assert decide(api, asked[2], action="cancel").status_code == 201
    resumed = resumed_run(api, asked[2])
    assert [e["status"] for e in resumed["input"]["resume"]] == ["resolved", "resolved", "cancelled"]
    results = tool_results(api, run["thread"], resumed["run_id"])
    assert [r["toolCallId"] for r in results] == [asked[0]["tool_call_id"], asked[1]["tool_call_id"]]
    runs_started = [e for e in events(api, run["thread"]) if e["type"] == "RUN_STARTED"]
    assert len(runs_started) == 2


def test_a_form_answer_is_validated_and_a_good_one_is_filed(api):
    run = start(api, "filing")
    [asked] = interrupts_of(api, run["thread"])
    assert asked["expires_at"] is not None
    bad = decide(api, asked, action="respond", payload={"quarter": "Q5", "year": 1999, "revenue": 1})
    assert bad.status_code == 400
    assert bad.json()["code"] == "INVALID_PAYLOAD"
    assert {e["path"] for e in bad.json()["errors"]} == {"/quarter", "/year"}
    approve = decide(api, asked, action="approve")
    assert approve.status_code == 400 and approve.json()["code"] == "NEEDS_PAYLOAD"
    good = decide(api, asked, action="respond", payload={"quarter": "Q1", "year": 2026, "revenue": 4200000})
    assert good.status_code == 201
    assert resumed_run(api, asked)["status"] == "succeeded"


def test_c19_c20_an_expired_form_cannot_be_answered_is_answered_cancelled_and_frees_the_thread(api):
    run = start(api, "filing")  # this server's filing forms expire after 2 s
    [asked] = interrupts_of(api, run["thread"])
    expired = wait_for(lambda: (d := api.get(f"/api/interrupts/{asked['id']}/").json())["status"] == "expired" and d)
    assert "expired at" in expired["closed_reason"]
    late = decide(api, asked, action="respond", payload={"quarter": "Q1", "year": 2026, "revenue": 1})
    assert late.status_code == 409 and late.json()["code"] == "EXPIRED"
    noted = [e for e in events(api, run["thread"]) if e["type"] == "CUSTOM"]
    assert noted[-1]["payload"]["name"] == "countersign.interrupts_expired"
    assert noted[-1]["from_agent"] is False
    # 1.0: still covered, abandoned with cancelled; the agent hears of it and finishes.
    done = resumed_run(api, asked)
    assert [e["status"] for e in done["input"]["resume"]] == ["cancelled"] and done["status"] == "succeeded"
    fresh = api.post(f"/api/threads/{run['thread']}/runs/", json={"message": "start over"})
    assert fresh.status_code == 201, fresh.text


def test_answering_one_of_two_planner_decisions_waits_for_the_other(api):
    run = start(api, "planner")
    budget, date = interrupts_of(api, run["thread"], count=2)
    assert decide(api, budget, action="approve").status_code == 201
    assert decide(api, date, action="respond", payload={"date": "2026-12-24"}).status_code == 201
    resumed = resumed_run(api, date)
    assert resumed["status"] == "succeeded"
    assert api.get(f"/api/threads/{run['thread']}/").json()["state"] == {"booked": "2026-12-24"}


def test_new_input_while_pending_is_refused(api):
    run = start(api, "deployer")
    interrupts_of(api, run["thread"])
    refused = api.post(f"/api/threads/{run['thread']}/runs/", json={"message": "deploy 43 instead"})
    assert refused.status_code == 409
    assert refused.json()["code"] == "PENDING_INTERRUPTS"
    assert "approve-deploy" in refused.json()["detail"]


def make_users(hub, usernames):
    """Reviewers with an API token each, made in one Django process (a start-up is a second or two)."""
    code = (
        "from django.contrib.auth import get_user_model; from django.contrib.auth.models import Group; "
        "from interrupts.hub import tokens; reviewers = Group.objects.get(name='Reviewers')\n"
        f"for name in {list(usernames)!r}:\n"
        "    u = get_user_model().objects.create_user(name, first_name=name.title()); u.groups.add(reviewers)\n"
        "    print(tokens.issue(u)[1])"
    )
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=hub.env,
                          capture_output=True, text=True, timeout=60, check=True)
    return [httpx.Client(base_url=hub.url, headers={"Authorization": f"Token {token}"}, timeout=30)
            for token in done.stdout.split()[-len(usernames):]]


def test_two_reviewers_racing_store_exactly_one_decision(hub, api):
    run = start(api, "janitor")
    [asked] = interrupts_of(api, run["thread"])
    clients = make_users(hub, [f"racer{i}" for i in range(6)])
    with ThreadPoolExecutor(len(clients)) as pool:
        answers = list(pool.map(lambda c: decide(c, asked, action="approve"), clients))
    assert sorted(a.status_code for a in answers) == [201] + [409] * 5
    winner = next(a for a in answers if a.status_code == 201).json()["user"]["username"]
    for loser in (a for a in answers if a.status_code == 409):
        assert loser.json()["code"] == "ALREADY_DECIDED"
        assert loser.json()["decided_by"] == winner
        assert f"already decided by {winner.title()}" in loser.json()["detail"]
    detail = api.get(f"/api/interrupts/{asked['id']}/").json()
    assert len(detail["decisions"]) == 1
    assert resumed_run(api, asked)["status"] == "succeeded"


def test_the_author_may_revise_a_draft_until_the_batch_is_sent(api):
    run = start(api, "planner")
    budget, date = interrupts_of(api, run["thread"], count=2)
    assert decide(api, budget, action="approve").status_code == 201
    revised = decide(api, budget, action="reject")
    assert revised.status_code == 201 and revised.json()["payload"] == {"approved": False}
    history = api.get(f"/api/interrupts/{budget['id']}/").json()["decisions"]
    assert [d["payload"] for d in history] == [{"approved": True}, {"approved": False}]
    assert history[0]["superseded_at"] is not None and history[1]["superseded_at"] is None
    assert decide(api, date, action="respond", payload={"date": "2026-12-24"}).status_code == 201
    resumed = resumed_run(api, date)
    assert answers(resumed["input"]["resume"])[0] == {"interruptId": "approve-budget", "status": "resolved",
                                                      "payload": {"approved": False}}
    too_late = decide(api, budget, action="approve")
    assert too_late.status_code == 409 and too_late.json()["code"] == "ALREADY_DECIDED"


def test_edit_is_refused_where_the_schema_offers_no_edits(api):
    run = start(api, "janitor")
    [asked] = interrupts_of(api, run["thread"])
    refused = decide(api, asked, action="edit", edited_args={"x": 1})
    assert refused.status_code == 400 and refused.json()["code"] == "EDITS_NOT_OFFERED"


def test_edited_args_are_checked_against_the_proposed_shape(api):
    run = start(api, "mailer")
    [asked] = interrupts_of(api, run["thread"])
    refused = decide(api, asked, action="edit", edited_args={"to": "not-an-email", "subject": "s", "body": "b"})
    assert refused.status_code == 400 and refused.json()["code"] == "INVALID_PAYLOAD"
    assert refused.json()["errors"][0]["path"] == "/editedArgs/to"
    assert api.get(f"/api/interrupts/{asked['id']}/").json()["status"] == "pending"


def test_bad_requests_get_json_errors_with_a_code(api):
    assert api.post("/api/threads/", json={"agent": "nobody"}).json()["code"] == "INVALID_REQUEST"
    bad = api.post("/api/interrupts/999999/decide/", json={"action": "approve"})
    assert bad.status_code == 404 and bad.json()["code"] == "NOT_FOUND"
    wrong = api.post("/api/threads/", json={"agent": "mailer", "message": "x" * 100_001})
    assert wrong.status_code == 400 and "message" in wrong.json()["fields"]
    paged = api.get("/api/threads/nope/events/")
    assert paged.status_code == 404


def test_the_api_requires_login(hub):
    anonymous = httpx.get(f"{hub.url}/api/interrupts/")
    assert anonymous.status_code == 401
    assert anonymous.json()["code"] == "NOT_AUTHENTICATED"
    forged = httpx.get(f"{hub.url}/api/interrupts/", headers={"Authorization": "Token not-a-token"})
    assert forged.status_code == 401


def test_agent_credentials_go_in_but_never_come_back(api):
    created = api.post(
        "/api/agents/",
        json={
            "name": "secretive",
            "url": "http://127.0.0.1:9/s/",
            "auth_header": "Authorization",
            "auth_value": "Bearer top-secret-value-9876",
        },
    )
    assert created.status_code == 201, created.text
    shown = api.get("/api/agents/secretive/").text
    assert "top-secret" not in shown and "••••9876" in shown


def test_events_are_paged_by_sequence_number(api):
    run = start(api, "mailer")
    finished_run(api, run["run_id"])
    everything = events(api, run["thread"])
    assert [e["seq"] for e in everything] == list(range(1, len(everything) + 1))
    page = api.get(f"/api/threads/{run['thread']}/events/", params={"after": 2, "limit": 3}).json()
    assert [e["seq"] for e in page["events"]] == [3, 4, 5]
    assert page["next_after"] == 5 and page["last_seq"] == len(everything)


def test_the_openapi_schema_and_docs_are_served(api, hub):
    schema = api.get("/api/schema/", headers={"Accept": "application/json"})
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/interrupts/{id}/decide/" in paths and "/api/threads/{thread_id}/events/" in paths
    assert httpx.get(f"{hub.url}/api/schema/").status_code == 401
    assert httpx.get(f"{hub.url}/api/docs/").status_code == 302  # to the login page
    browser = httpx.Client(base_url=hub.url)
    token = browser.get("/accounts/login/").cookies["csrftoken"]
    browser.post("/accounts/login/", data={"username": "reviewer", "password": "countersign",
                                           "csrfmiddlewaretoken": token}, headers={"Referer": f"{hub.url}/"})
    docs = browser.get("/api/docs/")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    # Offline: the UI's assets come from this server, not a CDN.
    assert "cdn.jsdelivr" not in docs.text and "unpkg.com" not in docs.text


def test_a_new_run_waits_for_the_one_in_progress(api):
    run = start(api, "x-slow-finish")
    busy = api.post(f"/api/threads/{run['thread']}/runs/", json={"message": "and now?"})
    assert busy.status_code == 409 and busy.json()["code"] == "RUN_IN_PROGRESS"
    finished_run(api, run["run_id"])
    assert api.post(f"/api/threads/{run['thread']}/runs/", json={"message": "and now?"}).status_code == 201


def test_lookups_never_answer_500(api):
    assert api.post("/api/interrupts/abc/decide/", json={"action": "approve"}).status_code == 404
    assert api.get("/api/runs/no-such-run/").json()["code"] == "NOT_FOUND"
