"""Every way an agent's stream can go wrong ends the run as failed, with a recorded RUN_ERROR and a code.

The agents here are real HTTP servers (tests/e2e/scripted_agent.py), each
misbehaving one way; the hub is `manage.py serve` with a 1.5 s idle timeout.
"""

import pytest

from .conftest import events, finished_run, pending, start


def failed(api, agent):
    run = start(api, agent)
    done = finished_run(api, run["run_id"])
    log = events(api, run["thread"])
    return done, log


@pytest.mark.parametrize(
    "agent, code, words",
    [
        ("x-http-422", "HTTP_ERROR", ["HTTP 422", "Field required"]),
        ("x-html", "BAD_CONTENT_TYPE", ["text/html", "not text/event-stream"]),
        ("x-refused", "AGENT_UNREACHABLE", ["Gave up after 3 attempts", "Could not connect", "127.0.0.1:9"]),
        ("x-silent", "TIMEOUT", ["sent nothing for 1.5 s"]),
        ("x-malformed", "MALFORMED_EVENT", ["invalid event", "JSON"]),
        ("x-unknown-type", "MALFORMED_EVENT", ["TELEPORT"]),
        ("x-no-terminal", "INCOMPLETE_STREAM", ["TEXT_MESSAGE_START"]),
        ("x-after-end", "AFTER_END", ["TEXT_MESSAGE_START"]),
        ("x-wrong-run", "RUN_MISMATCH", ["someone-elses-run"]),
        ("x-empty-interrupts", "MALFORMED_EVENT", ["interrupt"]),
        ("x-duplicate-ids", "DUPLICATE_INTERRUPT_ID", ["same"]),
    ],
)
def test_a_fault_fails_the_run_with_a_recorded_hub_error(api, agent, code, words):
    run, log = failed(api, agent)
    assert run["status"] == "failed"
    assert run["error_code"] == code
    for word in words:
        assert word in run["error_message"], run["error_message"]
    last = log[-1]
    assert last["type"] == "RUN_ERROR" and last["from_agent"] is False
    assert last["payload"]["code"] == code
    assert last["payload"]["message"] == run["error_message"]


def test_the_offending_data_is_kept_in_the_error_event(api):
    run, log = failed(api, "x-malformed")
    assert log[-1]["payload"]["rawEvent"] == "{not json"
    # What came before the fault is in the log too: nothing is dropped.
    assert [e["type"] for e in log] == ["RUN_STARTED", "RUN_ERROR"]
    assert log[0]["from_agent"] is True


def test_c1_c8_an_agents_error_before_run_started_is_its_own_failure_not_a_fault(api):
    run, log = failed(api, "x-error-first")
    assert (run["error_code"], run["error_message"]) == ("BOOM", "exploded early")
    assert run["fault"] == ""
    # The log's ending is the agent's own RUN_ERROR, as sent.
    assert [(e["type"], e["from_agent"]) for e in log] == [("RUN_ERROR", True)]
    assert log[-1]["payload"]["code"] == "BOOM"


def test_c7_an_agents_own_run_error_fails_the_run_with_its_code(api):
    run, log = failed(api, "x-agent-error")
    assert (run["error_code"], run["error_message"]) == ("QUOTA", "out of credits")
    assert log[-1]["from_agent"] is True


def test_a_legacy_run_finished_without_outcome_is_success(api):
    run, log = failed(api, "x-legacy")
    assert run["status"] == "succeeded" and run["outcome"] is None
    assert [e["type"] for e in log] == ["RUN_STARTED", "RUN_FINISHED"]


def test_an_agent_that_lingers_after_finishing_still_finishes(api):
    run, log = failed(api, "x-linger")
    assert run["status"] == "succeeded"


def test_events_after_the_end_close_the_interrupts_that_stream_raised(api):
    run, log = failed(api, "x-interrupt-then-noise")
    assert run["error_code"] == "AFTER_END"
    # The interrupt of a stream that broke after its end was never raised:
    # nobody is asked to decide on it.
    assert api.get("/api/interrupts/", params={"thread": run["thread"], "status": "all"}).json()["results"] == []
    assert [e["type"] for e in log][-2:] == ["RUN_FINISHED", "RUN_ERROR"]


def test_a_proposal_is_reassembled_from_its_argument_deltas(api, scripted):
    run = start(api, "x-approve")
    assert finished_run(api, run["run_id"])["status"] == "interrupted"
    [asked] = pending(api, run["thread"])
    assert asked["tool_name"] == "deleteRepo"
    assert asked["proposed_args"] == {"repo": "acme/web"}
    assert scripted.calls[("approve", run["thread"])] == 1


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://[::ffff:169.254.169.254]/",
                                 "http://0.0.0.0:9/"])
def test_an_agent_at_a_refused_address_fails_at_once_and_is_never_retried(api, url):
    # Cloud metadata, link-local and unspecified addresses are refused at connect time
    # (COUNTERSIGN_AGENT_NETWORKS): no byte reaches them, and a policy refusal is not an outage.
    name = f"x-refused-address-{abs(hash(url)) % 10_000}"
    response = api.post("/api/agents/", json={"name": name, "url": url})
    assert response.status_code == 201, response.text
    run, log = failed(api, name)
    assert run["status"] == "failed" and run["error_code"] == "AGENT_ADDRESS_REFUSED"
    assert run["attempts"] == 0
    assert log[-1]["type"] == "RUN_ERROR" and log[-1]["payload"]["code"] == "AGENT_ADDRESS_REFUSED"
    assert not log[-1]["from_agent"]
