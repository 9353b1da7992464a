"""An agent that streams its tool call and sends no MESSAGES_SNAPSHOT (as Pydantic AI does) resumes.

The scripted agent's "no-snapshot" path checks the resume's messages the way
Pydantic AI does: without the assistant turn carrying the call, it answers
RUN_ERROR. The thread's conversation is built from the events (C43, C47, C54).
"""

from .conftest import decide, finished_run, pending, resumed, start, wait_for


def thread_of(api, thread_id):
    return api.get(f"/api/threads/{thread_id}/").json()


def paused_without_snapshot(api):
    run = start(api, "x-no-snapshot", message="Delete acme/web")
    assert finished_run(api, run["run_id"])["status"] == "interrupted"
    [asked] = wait_for(lambda: pending(api, run["thread"]))
    return run, asked


def test_c47_a_streamed_tool_call_resumes_with_its_assistant_turn_when_approved(api):
    run, asked = paused_without_snapshot(api)
    # The card shows the call the stream proposed.
    assert asked["tool_name"] == "deleteRepo" and asked["proposed_args"] == {"repo": "acme/web"}
    decide(api, asked, action="approve")
    done = resumed(api, asked)
    assert done["status"] == "succeeded", done
    sent = done["input"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant"]
    assert sent[1]["toolCalls"][0]["function"] == {"name": "deleteRepo", "arguments": '{"repo": "acme/web"}'}
    thread = thread_of(api, run["thread"])
    # C48 / C44: the result right after its call, then the chunked answer; the state from the delta (C58).
    assert [(m["id"], m["role"]) for m in thread["messages"]] == [
        (sent[0]["id"], "user"), ("a-ns", "assistant"), ("r-ns", "tool"), ("a-ns-2", "assistant")]
    assert thread["messages"][2]["content"] == "deleted"
    assert thread["messages"][3]["content"] == "acme/web deleted"
    assert thread["state"] == {"asked": True}


def test_c47_a_streamed_tool_call_resumes_with_its_assistant_turn_when_rejected(api):
    run, asked = paused_without_snapshot(api)
    decide(api, asked, action="reject")
    done = resumed(api, asked)
    assert done["status"] == "succeeded", done
    assert thread_of(api, run["thread"])["messages"][-1]["content"] == "acme/web not deleted"
