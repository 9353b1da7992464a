"""Drive the LangGraph test agent and print the SSE streams it sends.

Standard library only, so any Python 3.12+ runs it. By default it starts
``langgraph_agent.py`` with ``.venv-langgraph/bin/python`` on a free port,
runs every scenario, checks what it expects, prints the streams and stops the
server; ``--url`` points it at a server that is already running instead.

    python3.13 tests/external/probe.py            # trimmed transcript
    python3.13 tests/external/probe.py --full     # every event in full
    python3.13 tests/external/probe.py --url http://127.0.0.1:8765

Exit status 0 when every expectation held.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
AGENT_PYTHON = ROOT / ".venv-langgraph" / "bin" / "python"

FULL = False
FAILURES: list[str] = []


def body(thread: str, run: str, resume: list | None = None, messages: list | None = None) -> dict:
    data = {
        "threadId": thread,
        "runId": run,
        "messages": messages or [],
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    if resume is not None:
        data["resume"] = resume
    return data


def post(url: str, data: dict | str) -> tuple[int, str, list[dict] | dict]:
    raw = data if isinstance(data, str) else json.dumps(data)
    request = urllib.request.Request(
        url,
        data=raw.encode(),
        method="POST",
        headers={"content-type": "application/json", "accept": "text/event-stream"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
            ctype = response.headers.get("content-type", "")
            status = response.status
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("content-type", ""), json.loads(error.read().decode())
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    return status, ctype, events


def trim(event: dict) -> str:
    if FULL:
        return json.dumps(event)
    kind = event.get("type")
    if kind == "STATE_SNAPSHOT":
        snap = event["snapshot"]
        return json.dumps(
            {"type": kind, "snapshot": {k: (f"[{len(v)} msgs]" if k == "messages" else v) for k, v in snap.items()}}
        )
    if kind == "MESSAGES_SNAPSHOT":
        msgs = [
            {k: v for k, v in m.items() if k in ("role", "content", "toolCalls", "toolCallId")}
            for m in event["messages"]
        ]
        return json.dumps({"type": kind, "messages": msgs})
    if kind == "RUN_FINISHED" and (event.get("outcome") or {}).get("interrupts"):
        event = json.loads(json.dumps(event))
        for item in event["outcome"]["interrupts"]:
            if "responseSchema" in item:
                item["responseSchema"] = "{...}"
            raw = item.get("metadata", {}).get("langgraph", {})
            if "raw" in raw:
                raw["raw"] = "{...same dict the node passed to interrupt()...}"
    return json.dumps(event)


def show(title: str, url: str, data: dict | str) -> list[dict] | dict:
    status, ctype, events = post(url, data)
    print(f"\n### {title}\nPOST {url}\n{data if isinstance(data, str) else json.dumps(data)}")
    print(f"-> HTTP {status} {ctype}")
    if isinstance(events, dict):
        print(json.dumps(events))
    else:
        for event in events:
            print("data: " + trim(event))
    return events


def expect(condition: bool, what: str) -> None:
    print(("  ok: " if condition else "  FAILED: ") + what)
    if not condition:
        FAILURES.append(what)


def finished(events) -> dict:
    return events[-1] if isinstance(events, list) and events and events[-1]["type"] == "RUN_FINISHED" else {}


def interrupts(events) -> list[dict]:
    return (finished(events).get("outcome") or {}).get("interrupts") or []


def state(events) -> dict:
    snaps = [e["snapshot"] for e in events if e["type"] == "STATE_SNAPSHOT"]
    return snaps[-1] if snaps else {}


def run_scenarios(base: str) -> None:
    approve = f"{base}/approve/"

    # 1. First run, then resolved approved.
    first = show("approve: first run", approve, body("t1", "r1"))
    found = interrupts(first)
    expect(len(found) == 1 and found[0]["reason"] == "tool_call", "RUN_FINISHED outcome interrupt, reason tool_call")
    expect(
        [e["type"] for e in first[-2:]] == ["STEP_FINISHED", "RUN_FINISHED"],
        "no CUSTOM on_interrupt before RUN_FINISHED",
    )
    expect(any(e["type"] == "MESSAGES_SNAPSHOT" for e in first), "MESSAGES_SNAPSHOT before the interrupt")
    iid = found[0]["id"] if found else "missing"
    second = show(
        "approve: resume approved",
        approve,
        body("t1", "r2", [{"interruptId": iid, "status": "resolved", "payload": {"approved": True}}]),
    )
    expect(state(second).get("decision") == "approved", "decision == approved")
    expect(finished(second) and "outcome" not in finished(second), "success RUN_FINISHED has no outcome field")

    # 2. Rejected.
    first = show("approve: first run (t2)", approve, body("t2", "r1"))
    iid = interrupts(first)[0]["id"]
    second = show(
        "approve: resume rejected",
        approve,
        body("t2", "r2", [{"interruptId": iid, "status": "resolved", "payload": {"approved": False}}]),
    )
    expect(state(second).get("decision") == "rejected", "decision == rejected")

    # 3. Cancelled.
    first = show("approve: first run (t3)", approve, body("t3", "r1"))
    iid = interrupts(first)[0]["id"]
    second = show("approve: resume cancelled", approve, body("t3", "r2", [{"interruptId": iid, "status": "cancelled"}]))
    expect(state(second).get("decision") == "cancelled", "decision == cancelled")

    # 4. Contract rules the package does not enforce.
    first = show("approve: first run (t4)", approve, body("t4", "r1"))
    iid = interrupts(first)[0]["id"]
    again = show("approve: new input on a pending thread, no resume (rule 4)", approve, body("t4", "r2"))
    expect(
        [e["type"] for e in again] == ["RUN_STARTED", "RUN_FINISHED"] and interrupts(again)[0]["id"] == iid,
        "no RUN_ERROR: it replays the same open interrupt",
    )
    wrong = show(
        "approve: resume naming an unknown interruptId (rule 2)",
        approve,
        body("t4", "r3", [{"interruptId": "not-an-interrupt", "status": "resolved", "payload": {"approved": True}}]),
    )
    expect(state(wrong).get("decision") == "approved", "no RUN_ERROR: the unknown id resumes the open interrupt")
    replay = show(
        "approve: the same resume replayed on the finished thread (rule 5)",
        approve,
        body("t4", "r4", [{"interruptId": iid, "status": "resolved", "payload": {"approved": True}}]),
    )
    expect(
        finished(replay)
        and not any(e["type"] in ("RUN_ERROR", "STEP_STARTED") for e in replay)
        and state(replay).get("history") == ["proposed", "answered", "approved"],
        "replayed resume: no RUN_ERROR, no node runs, state unchanged",
    )
    fresh = show("approve: new input on the finished thread", approve, body("t4", "r5"))
    expect(
        interrupts(fresh)
        and interrupts(fresh)[0]["id"] != iid
        and interrupts(fresh)[0]["toolCallId"] == "call_refund_3",
        "the graph starts over: a new interrupt id and a new tool call",
    )
    orphan = show(
        "approve: resume on a thread that never ran",
        approve,
        body("t-none", "r1", [{"interruptId": iid, "status": "resolved", "payload": {"approved": True}}]),
    )
    expect(
        len(interrupts(orphan)) == 1 and interrupts(orphan)[0]["id"] != iid,
        "no RUN_ERROR: the resume is ignored, the graph runs from START and interrupts",
    )
    after = show(
        "approve: then resolving that new interrupt",
        approve,
        body(
            "t-none",
            "r2",
            [{"interruptId": interrupts(orphan)[0]["id"], "status": "resolved", "payload": {"approved": False}}],
        ),
    )
    expect(state(after).get("decision") == "rejected", "decision == rejected (the ignored resume left no trace)")
    bad = show(
        "approve: payload against responseSchema (rule 6)",
        approve,
        body("t5", "r1"),
    )
    iid = interrupts(bad)[0]["id"]
    bad = show(
        "approve: resume payload violating responseSchema",
        approve,
        body("t5", "r2", [{"interruptId": iid, "status": "resolved", "payload": {"approved": "yes please"}}]),
    )
    expect(state(bad).get("decision") == "rejected", "no RUN_ERROR: schema not checked (node reads it as not approved)")

    # 5. Malformed bodies.
    err = show("malformed: runId and messages missing", approve, {"threadId": "t9"})
    expect(isinstance(err, dict) and "detail" in err, "HTTP 422 JSON")
    show("malformed: not JSON", approve, "nope")
    show(
        "malformed: resume status not resolved|cancelled",
        approve,
        body("t9", "r1", [{"interruptId": "x", "status": "maybe"}]),
    )

    # 6. Form: input_required with expiresAt.
    form = f"{base}/form/"
    first = show("form: first run", form, body("f1", "r1"))
    found = interrupts(first)
    expect(
        found and found[0]["reason"] == "input_required" and "expiresAt" in found[0], "input_required with expiresAt"
    )
    second = show(
        "form: resume",
        form,
        body(
            "f1",
            "r2",
            [{"interruptId": found[0]["id"], "status": "resolved", "payload": {"quarter": "Q1", "year": 2026}}],
        ),
    )
    expect(state(second).get("decision") == "submitted", "decision == submitted")

    # 7. Parallel interrupts.
    for path, mapped in (("/parallel/", True), ("/parallel-stock/", False)):
        url = f"{base}{path}"
        thread = "p1" if mapped else "ps1"
        first = show(f"{path}: first run", url, body(thread, "r1"))
        found = interrupts(first)
        expect(len(found) == 2, "two interrupts in one outcome")
        entries = [
            {"interruptId": found[0]["id"], "status": "resolved", "payload": {"approved": True}},
            {"interruptId": found[1]["id"], "status": "cancelled"},
        ]
        second = show(f"{path}: resume both (one approved, one cancelled)", url, body(thread, "r2", entries))
        if mapped:
            expect(bool(state(second).get("summary")), "summary written after both answers")
        else:
            expect(any(e["type"] == "RUN_ERROR" for e in second), "stock mapping: RUN_ERROR")

    url = f"{base}/parallel/"
    first = show("/parallel/: first run (p2)", url, body("p2", "r1"))
    found = interrupts(first)
    partial = show(
        "/parallel/: partial resume, one of two (rule 3)",
        url,
        body("p2", "r2", [{"interruptId": found[0]["id"], "status": "resolved", "payload": {"approved": True}}]),
    )
    left = interrupts(partial)
    expect(len(left) == 1 and left[0]["id"] == found[1]["id"], "no RUN_ERROR: the other interrupt stays open")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_agent(log_path: Path) -> tuple[subprocess.Popen, str]:
    if not AGENT_PYTHON.exists():
        sys.exit(f"{AGENT_PYTHON} is missing: create it from tests/external/requirements-langgraph.txt")
    port = free_port()
    log = open(log_path, "w")
    process = subprocess.Popen(
        [str(AGENT_PYTHON), str(HERE / "langgraph_agent.py"), "--port", str(port)],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if f"ready on {url}" in log_path.read_text():
            return process, url
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    sys.exit(f"agent did not start:\n{log_path.read_text()}")


def main() -> None:
    global FULL
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", help="a running agent, e.g. http://127.0.0.1:8765 (default: start one)")
    parser.add_argument("--full", action="store_true", help="print every event untrimmed")
    parser.add_argument("--log", default="/tmp/langgraph_agent_probe.log")
    args = parser.parse_args()
    FULL = args.full
    process = None
    base = args.url
    if not base:
        process, base = start_agent(Path(args.log))
    try:
        run_scenarios(base.rstrip("/"))
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
    print(f"\n{len(FAILURES)} failed" + (": " + "; ".join(FAILURES) if FAILURES else ""))
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
