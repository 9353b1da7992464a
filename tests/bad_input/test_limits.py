"""Too much, or the wrong thing, at every door: agents' streams, the REST API, the AG-UI gateway.

Everything runs against `manage.py serve` (the `doors` fixture) with small
limits, over real sockets; the agents are tests/bad_input/agents.py.
"""

import json
import os

import httpx
import pytest
from django.core.exceptions import PermissionDenied, RequestDataTooBig, TooManyFieldsSent
from django.db import DataError
from django.http import Http404

from interrupts.api.errors import exception_handler
from interrupts.protocol.sse import SSEReader

from ..e2e.conftest import events, finished_run, pending, start, wait_for
from .agents import MAX_EVENT_BYTES, MAX_RUN_BYTES, MAX_RUN_EVENTS
from .conftest import MAX_REQUEST_BYTES

ON_POSTGRES = os.environ.get("DATABASE_URL", "").startswith("postgres")


def refusal(response: httpx.Response, status: int, code: str) -> str:
    """Check a REST API refusal's status and {code, detail} body; return the detail."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["code"] == code, body
    assert isinstance(body["detail"], str) and body["detail"]
    return body["detail"]


def gateway_refusal(response: httpx.Response, status: int, code: str) -> str:
    """The gateway refuses before streaming as every HTTP surface does: JSON {code, detail}, never a stream."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["code"] == code, body
    assert isinstance(body["detail"], str) and body["detail"]
    return body["detail"]


def ended_run(api, agent):
    run = start(api, agent)
    return finished_run(api, run["run_id"]), events(api, run["thread"])


def pending_interrupt(api, agent="deployer"):
    run = start(api, agent)
    [interrupt] = wait_for(lambda: pending(api, run["thread"]))
    return interrupt


# --------------------------------------------------------------------------- #
# What an agent sends
# --------------------------------------------------------------------------- #


def test_an_event_under_the_limit_is_recorded_whole(api):
    run, log = ended_run(api, "x-near-limit")
    assert run["status"] == "succeeded", run
    [content] = [e for e in log if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert content["payload"]["delta"] == "x" * (MAX_EVENT_BYTES - 1024)


def test_an_oversized_event_fails_the_run_and_is_never_recorded(api):
    run, log = ended_run(api, "x-big-event")
    assert run["status"] == "failed"
    assert f"exceeds {MAX_EVENT_BYTES} bytes" in run["error_message"], run["error_message"]
    # What came before the oversized event is kept; it and what follows are not.
    assert [e["type"] for e in log] == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "RUN_ERROR"]
    assert log[2]["payload"]["delta"] == "small"
    assert log[-1]["from_agent"] is False and log[-1]["payload"]["code"] == run["error_code"]
    assert len(json.dumps(log[-1]["payload"])) < MAX_EVENT_BYTES  # the error does not carry the event along


def test_an_oversized_event_is_reported_as_too_large(api):
    run, _ = ended_run(api, "x-big-event")
    assert run["error_code"] == "EVENT_TOO_LARGE"  # not MALFORMED_STREAM: the stream itself was fine


def test_a_run_with_too_many_events_fails(api):
    run, log = ended_run(api, "x-many-events")
    assert run["status"] == "failed" and run["error_code"] == "TOO_MANY_EVENTS"
    assert str(MAX_RUN_EVENTS) in run["error_message"]
    assert len(log) == MAX_RUN_EVENTS + 1  # the events up to the limit, then the hub's RUN_ERROR


def test_a_run_whose_stream_is_too_large_fails(api):
    run, log = ended_run(api, "x-big-stream")
    assert run["status"] == "failed" and run["error_code"] == "STREAM_TOO_LARGE"
    assert str(MAX_RUN_BYTES) in run["error_message"]
    assert sum(len(json.dumps(e["payload"])) for e in log) <= MAX_RUN_BYTES + MAX_EVENT_BYTES


def test_an_event_with_a_nul_character_never_breaks_the_run(api):
    run, log = ended_run(api, "x-nul")
    # Whatever the database, the run ends as the agent said, or as a clear refusal, never as the hub's crash.
    assert run["error_code"] != "HUB_ERROR", run["error_message"]
    assert run["status"] in ("succeeded", "failed")
    if run["status"] == "failed":
        assert run["error_code"] == "MALFORMED_EVENT" and "NUL" in run["error_message"]


def post_escaped(client, url: str, body, **headers) -> httpx.Response:
    """POST ``body`` as JSON with every non-ASCII character escaped: the only way to send a lone surrogate."""
    return client.post(url, content=json.dumps(body), headers={"content-type": "application/json", **headers},
                       timeout=30)


def test_an_event_with_a_lone_surrogate_fails_the_run_and_leaves_its_thread_readable(api):
    # It once ended the run as a hub error and left the thread's pages and API hanging for good.
    run, log = ended_run(api, "x-surrogate")
    assert (run["status"], run["error_code"]) == ("failed", "MALFORMED_EVENT"), run
    assert "surrogate" in run["error_message"]
    assert [e["type"] for e in log] == ["RUN_STARTED", "RUN_ERROR"]
    assert api.get(f"/api/threads/{run['thread']}/", timeout=10).status_code == 200
    assert api.get(f"/api/threads/{run['thread']}/events/", timeout=10).status_code == 200


@pytest.mark.parametrize("body", [
    {"agent": "mailer", "forwarded_props": {"note": "a\ud800b"}},
    {"agent": "mailer", "forwarded_props": {"\udfff": 1}},
    {"agent": "mailer", "message": "reversed pair \ude00\ud83d"},
])
def test_a_lone_surrogate_in_a_body_is_refused(api, body):
    before = api.get("/api/threads/").json()["count"]
    refusal(post_escaped(api, "/api/threads/", body), 400, "LONE_SURROGATE")
    assert api.get("/api/threads/").json()["count"] == before
    # A whole pair is a character like any other.
    assert (
        api.post("/api/threads/", json={"agent": "mailer", "forwarded_props": {"ok": "\U0001f600"}}).status_code == 201
    )


def test_a_lone_surrogate_in_a_decision_is_refused_and_nothing_is_stored(api):
    interrupt = pending_interrupt(api)
    for body in ({"action": "respond", "payload": {"build": 7, "note": "\ud800"}},
                 {"action": "approve", "metadata": {"why": "\udbff"}}, {"action": "approve", "comment": "\ud800"}):
        refusal(post_escaped(api, f"/api/interrupts/{interrupt['id']}/decide/", body), 400, "LONE_SURROGATE")
    assert api.get(f"/api/interrupts/{interrupt['id']}/").json()["decisions"] == []


def test_a_lone_surrogate_sent_through_the_gateway_is_refused(doors, api):
    body = {"threadId": "gw-sur", "runId": "r1", "messages": [{"id": "m1", "role": "user", "content": "hi\ud800"}]}
    response = post_escaped(httpx, f"{doors.url}/agui/mailer/", body, Authorization=f"Token {doors.token}")
    gateway_refusal(response, 400, "LONE_SURROGATE")
    refusal(api.get("/api/threads/gw-sur/"), 404, "NOT_FOUND")


def test_json_inside_agent_strings_that_decodes_to_a_lone_surrogate_is_shown_as_sent(api, doors):
    # The args arrive as valid text; decoded for display they made the thread page a 500 for good.
    run, log = ended_run(api, "x-surrogate-inside")
    assert run["status"] == "interrupted", run
    [asked] = pending(api, run["thread"])
    assert asked["proposed_args"] == '{"a": "\\ud800"}'  # kept as JSON text, which can be shown and stored
    with httpx.Client(base_url=doors.url, timeout=10) as browser:
        csrf = browser.get("/accounts/login/").cookies["csrftoken"]
        browser.post("/accounts/login/", data={"username": "reviewer", "password": "countersign",
                                               "csrfmiddlewaretoken": csrf}, headers={"Referer": doors.url})
        for path in (f"/threads/{run['thread']}/", f"/threads/{run['thread']}/events/?after=0",
                     f"/inbox/?thread={run['thread']}", "/audit/"):
            page = browser.get(path)
            assert page.status_code == 200, (path, page.status_code)
            assert "\\ud800" in page.text or path == "/audit/"


def test_a_lone_surrogate_in_a_gateway_state_key_is_refused_not_a_500(doors, api):
    body = b'{"threadId":"gw-sk","runId":"r1","messages":[],"tools":[],"context":[],"state":{"\\ud800":1}}'
    response = httpx.post(f"{doors.url}/agui/mailer/", content=body, timeout=30,
                          headers={"Authorization": f"Token {doors.token}", "content-type": "application/json"})
    gateway_refusal(response, 400, "LONE_SURROGATE")


def test_an_event_with_a_raw_nul_byte_fails_the_run_as_malformed(api):
    run, log = ended_run(api, "x-nul-byte")
    assert (run["status"], run["error_code"]) == ("failed", "MALFORMED_EVENT"), run
    assert [e["type"] for e in log] == ["RUN_STARTED", "RUN_ERROR"]


def test_an_error_page_with_a_nul_byte_fails_the_run_with_its_text(api):
    run, log = ended_run(api, "x-http-error-nul")
    assert (run["status"], run["error_code"]) == ("failed", "HTTP_ERROR"), run
    assert "HTTP 500: boom" in run["error_message"] and "broken" in run["error_message"]


def test_the_gateway_relays_the_hubs_error_for_an_oversized_event(doors):
    body = {"threadId": "gw-big-event", "runId": "r1", "messages": []}
    response = httpx.post(f"{doors.url}/agui/x-big-event/", json=body,
                          headers={"Authorization": f"Token {doors.token}"}, timeout=30)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    reader = SSEReader()
    streamed = [json.loads(f.data) for f in reader.feed(response.content) + reader.close()]
    assert [e["type"] for e in streamed] == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "RUN_ERROR"]
    assert f"exceeds {MAX_EVENT_BYTES} bytes" in streamed[-1]["message"]


# --------------------------------------------------------------------------- #
# Request bodies: too large, too deep, NUL, not JSON
# --------------------------------------------------------------------------- #

TOO_LARGE = "x" * (MAX_REQUEST_BYTES + 1)


@pytest.mark.parametrize("path, body", [
    ("/api/threads/", {"agent": "mailer", "forwarded_props": {"blob": TOO_LARGE}}),
    ("/api/threads/", {"agent": "mailer", "message": "m" * 90_000 + "é" * 90_000}),  # under max_length, over the bytes
    ("/api/agents/", {"name": "huge", "url": "http://127.0.0.1:9/", "description": TOO_LARGE}),
    ("/api/interrupts/{interrupt}/decide/", {"action": "respond", "payload": {"build": 7, "blob": TOO_LARGE}}),
    ("/api/threads/{thread}/runs/", {"message": "hello", "forwarded_props": [TOO_LARGE]}),
])
def test_a_body_over_the_request_limit_is_413_json(api, path, body):
    if "{" in path:
        interrupt = pending_interrupt(api)
        path = path.format(interrupt=interrupt["id"], thread=interrupt["thread"])
    detail = refusal(api.post(path, json=body), 413, "TOO_LARGE")
    assert "COUNTERSIGN_MAX_REQUEST_BYTES" in detail


def test_a_decision_payload_under_the_request_limit_is_stored_whole(api):
    interrupt = pending_interrupt(api)
    payload = {"build": 7, "notes": "n" * (MAX_REQUEST_BYTES - 1024)}
    answer = api.post(f"/api/interrupts/{interrupt['id']}/decide/", json={"action": "respond", "payload": payload})
    assert answer.status_code == 201, answer.text[:500]
    assert answer.json()["payload"] == payload


def nested(depth: int):
    value = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_a_decision_nested_too_deep_is_refused_before_anything_is_recorded(api):
    # Accepted, it used to fail with a 500 when the resume was serialised.
    interrupt = pending_interrupt(api)
    body = {"action": "respond", "payload": {"build": 7, "deep": nested(300)}}
    detail = refusal(api.post(f"/api/interrupts/{interrupt['id']}/decide/", json=body), 400, "TOO_DEEP")
    assert "200 levels" in detail
    assert api.get(f"/api/interrupts/{interrupt['id']}/").json()["decisions"] == []
    # Deeper than Python's own JSON reader can follow: the same refusal, not a RecursionError.
    text = '{"action": "respond", "payload": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = api.post(f"/api/interrupts/{interrupt['id']}/decide/", content=text,
                        headers={"content-type": "application/json"})
    refusal(response, 400, "TOO_DEEP")
    # Nesting within the bound is fine.
    fine = api.post(f"/api/interrupts/{interrupt['id']}/decide/",
                    json={"action": "respond", "payload": {"build": 7, "deep": nested(150)}})
    assert fine.status_code == 201, fine.text


@pytest.mark.parametrize("body", [
    {"agent": "mailer", "forwarded_props": {"note": "a\u0000b"}},
    {"agent": "mailer", "forwarded_props": {"k\u0000": 1}},
    {"agent": "mailer", "forwarded_props": [["\u0000"]]},
])
def test_a_nul_character_in_a_body_is_refused_on_every_database(api, body):
    before = api.get("/api/threads/").json()["count"]
    detail = refusal(api.post("/api/threads/", json=body), 400, "NUL_CHARACTER")
    assert "forwarded_props" in detail
    assert api.get("/api/threads/").json()["count"] == before


def test_a_nul_character_in_a_decision_is_refused(api):
    interrupt = pending_interrupt(api)
    for body in ({"action": "respond", "payload": {"build": 7, "note": "\u0000"}},
                 {"action": "approve", "metadata": {"why": "\u0000"}}):
        refusal(api.post(f"/api/interrupts/{interrupt['id']}/decide/", json=body), 400, "NUL_CHARACTER")
    assert api.get(f"/api/interrupts/{interrupt['id']}/").json()["decisions"] == []


@pytest.mark.parametrize("path", [
    "/api/threads/%00/", "/api/threads/a%00b/events/", "/api/agents/%00/", "/api/runs/%00/",
    "/api/runs/r/?thread=%00", "/api/interrupts/?agent=%00", "/api/interrupts/?thread=%00&reason=%00",
    "/api/threads/?agent=%00",
])
def test_a_nul_character_in_the_url_is_never_a_500(api, path):
    # PostgreSQL cannot hold NUL (a lookup would be a 500); SQLite would find nothing: refused alike.
    refusal(api.get(path), 400, "NUL_CHARACTER")


@pytest.mark.parametrize("path", ["/threads/%00/", "/inbox/?agent=%00", "/audit/?agent=%00", "/threads/?q=a%00"])
def test_a_nul_character_in_a_page_address_is_a_plain_400(api, path):
    response = api.get(path)
    assert response.status_code == 400, response.text
    assert "NUL character" in response.text and response.headers["content-type"].startswith("text/plain")


def test_a_huge_page_size_is_capped(api):
    # ?limit= used to reach the database as is: a 500 from either of them.
    for limit in ("10000", str(10**30)):
        response = api.get("/api/agents/", params={"limit": limit})
        assert response.status_code == 200, response.text
        assert response.json()["next"] is None
    page = api.get("/api/threads/", params={"limit": str(10**30), "offset": str(10**30)})
    assert page.status_code == 200 and page.json()["results"] == []


@pytest.mark.parametrize("content, content_type, status, code", [
    (b'{"agent": ', "application/json", 400, "PARSE_ERROR"),
    (b"\xff\xfe{}", "application/json", 400, "PARSE_ERROR"),
    (b'{"agent": NaN}', "application/json", 400, "PARSE_ERROR"),
    (b"[1, 2]", "application/json", 400, "INVALID_REQUEST"),
    (b"", "application/json", 400, "INVALID_REQUEST"),
    (b'{"agent": "mailer"}', "text/plain", 415, "UNSUPPORTED_MEDIA_TYPE"),
    (b"agent=mailer", "application/x-www-form-urlencoded", 415, "UNSUPPORTED_MEDIA_TYPE"),
    # A bytes-to-bytes codec as the charset would decompress the body past the size limit.
    (b'{"agent": "mailer"}', "application/json; charset=bz2_codec", 400, "PARSE_ERROR"),
])
def test_a_malformed_or_mistyped_body_is_a_json_refusal(api, content, content_type, status, code):
    before = api.get("/api/threads/").json()["count"]
    refusal(api.post("/api/threads/", content=content, headers={"content-type": content_type}), status, code)
    assert api.get("/api/threads/").json()["count"] == before


@pytest.mark.parametrize("method, path, hint", [
    ("GET", "/api/nothing-here/", ""),
    ("GET", "/api/interrupts/not-a-number/", ""),
    ("POST", "/api/interrupts/abc/decide/", ""),
    ("DELETE", "/api/threads/t/events/x/", ""),
    ("GET", "/api/agents", "/api/agents/"),
    ("POST", "/api/threads", "/api/threads/"),
])
def test_a_path_no_endpoint_serves_is_a_json_404(api, doors, method, path, hint):
    detail = refusal(api.request(method, path, json={}), 404, "NOT_FOUND")
    assert path in detail and hint in detail
    # Anonymous callers learn nothing more than anywhere else in the API.
    anonymous = httpx.request(method, f"{doors.url}{path}", json={})
    refusal(anonymous, 401, "NOT_AUTHENTICATED")


# --------------------------------------------------------------------------- #
# The AG-UI gateway
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("content, content_type, status, code", [
    (b"{not json", "application/json", 400, "BAD_JSON"),
    (b"\xff\xfe", "application/json", 400, "BAD_ENCODING"),
    (b"[]", "application/json", 400, "NOT_AN_OBJECT"),
    (b"", "application/json", 400, "BAD_JSON"),
    (b'{"threadId": "t", "runId": "r"}', "application/json", 400, "MISSING_FIELD"),
    (("[" * 1000 + "]" * 1000).encode(), "application/json", 400, "BAD_JSON"),
    (b'{"threadId": "t", "runId": "r", "messages": [], "state": {"a": "\\u0000"}}', "application/json",
     400, "NUL_CHARACTER"),
    (b'{"threadId": "t", "runId": "r", "messages": []}', "text/plain", 415, "UNSUPPORTED_MEDIA_TYPE"),
    (b'{"threadId": "t", "runId": "r", "messages": []}', "application/x-www-form-urlencoded", 415,
     "UNSUPPORTED_MEDIA_TYPE"),  # what curl -d sends unless told otherwise
    (b'{"threadId": "t", "runId": "r", "messages": [], "state": {"blob": "' + b"x" * MAX_REQUEST_BYTES + b'"}}',
     "application/json", 413, "TOO_LARGE"),
])
def test_the_gateway_refuses_bad_bodies_with_json(doors, content, content_type, status, code):
    headers = {"Authorization": f"Token {doors.token}", "content-type": content_type}
    response = httpx.post(f"{doors.url}/agui/mailer/", content=content, headers=headers, timeout=30)
    gateway_refusal(response, status, code)


def test_a_nul_character_sent_through_the_gateway_reaches_neither_the_log_nor_the_agent(doors, api):
    body = {"threadId": "gw-nul", "runId": "r1", "messages": [{"id": "m1", "role": "user", "content": "hi\u0000"}]}
    response = httpx.post(f"{doors.url}/agui/mailer/", json=body,
                          headers={"Authorization": f"Token {doors.token}"}, timeout=30)
    assert "messages[0].content" in gateway_refusal(response, 400, "NUL_CHARACTER")
    refusal(api.get("/api/threads/gw-nul/"), 404, "NOT_FOUND")


@pytest.mark.parametrize("method, path", [
    ("POST", "/agui/mailer"), ("POST", "/agui/not a slug/"), ("GET", "/agui/"), ("POST", "/agui/mailer/extra/"),
])
def test_a_gateway_path_that_names_no_agent_is_a_json_404(doors, method, path):
    response = httpx.request(method, f"{doors.url}{path}", json={"threadId": "t", "runId": "r", "messages": []},
                             headers={"Authorization": f"Token {doors.token}"})
    assert "/agui/<agent>/" in gateway_refusal(response, 404, "NOT_FOUND")


# --------------------------------------------------------------------------- #
# The API's exception handler, for what the served app cannot be made to raise on demand
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("exc, status, code", [
    (RequestDataTooBig(), 413, "TOO_LARGE"),
    (TooManyFieldsSent("Too many fields."), 400, "BAD_REQUEST"),
    (Http404(), 404, "NOT_FOUND"),
    (PermissionDenied(), 403, "PERMISSION_DENIED"),
    # psycopg refuses a NUL in a parameter; PostgreSQL one in jsonb (SQLSTATE 22P05).
    (DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"), 400, "NUL_CHARACTER"),
])
def test_djangos_and_the_databases_refusals_become_json(exc, status, code):
    response = exception_handler(exc, {})
    assert response.status_code == status
    assert response.data["code"] == code and response.data["detail"]


def test_other_database_errors_stay_server_errors():
    # A DataError that is not about the client's text is a bug of ours: not dressed up as a 400.
    assert exception_handler(DataError("value too long for type character varying(100)"), {}) is None
