"""Scale-out: several `manage.py serve` processes of one deployment share the work.

Three server processes run on one database (SQLite file, or PostgreSQL in the
second pass) and one Redis channel prefix, as behind a proxy in production.
Their supervisors share the queue of runs; broadcasts cross processes through
Redis. The scripted agent (real HTTP, in this test process) records every call,
so each test proves a run or a resume reached the agent exactly once,
whichever process streamed it. `Run.claimed_by` (read from the database: the
API does not show it) names the streaming process as ``host:pid:nonce``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from websockets.sync.client import connect

from ..agui import answers as attested
from ..servers import ROOT, cluster, stop_all
from .conftest import events, finished_run, pending, session_cookie, start, wait_for
from .scripted_agent import Gate

PROCESSES = 3
# Each process streams at most MAX_STREAMS runs at once, of which new runs may
# take all but the slots kept for resumes (a fifth: 2 of 10). So NEW_SLOTS *
# PROCESSES new runs, or MAX_STREAMS * PROCESSES resumes, open together at the
# agent prove that every process took its share.
MAX_STREAMS = 10
NEW_SLOTS = MAX_STREAMS - max(1, MAX_STREAMS // 5)
NEW_RUNS = PROCESSES * NEW_SLOTS
RUNS = PROCESSES * MAX_STREAMS
# One agent may stream at most COUNTERSIGN_MAX_AGENT_STREAMS runs at once in the
# whole deployment (9 here): the runs are spread over several agents, all the
# scripted agent's "gated" script, so that limit is never what holds them back.
GATED = [f"x-gated-{n}" for n in range(5)]
REVIEWERS = 50
BATCH = 50  # interrupts raised at once by the scripted agent's "batch-50"


@pytest.fixture(scope="module")
def apps(tmp_path_factory, scripted, redis_url):
    servers = cluster(tmp_path_factory.mktemp("scale"), PROCESSES, self_approving=True, REDIS_URL=redis_url,
                      COUNTERSIGN_POLL_INTERVAL="0.2", COUNTERSIGN_MAX_STREAMS=str(MAX_STREAMS))
    try:
        with servers[0].api() as api:
            for name, path in [*((g, "gated") for g in GATED), ("x-gated", "gated"), ("x-approve", "approve"),
                               ("x-batch-50", "batch-50")]:
                response = api.post("/api/agents/", json={"name": name, "url": f"{scripted.url}/{path}/"})
                assert response.status_code == 201, response.text
        yield servers
    finally:
        stop_all(servers)


@pytest.fixture(scope="module")
def reviewers(apps):
    """API tokens of REVIEWERS distinct users (one user answering twice would be revising, not racing)."""
    code = (
        "from django.contrib.auth import get_user_model; from interrupts.hub import tokens; "
        "User = get_user_model(); "
        f"users = [User.objects.create_user(f'racer{{n}}', first_name=f'Racer{{n}}') for n in range({REVIEWERS})]; "
        "from django.contrib.auth.models import Group; "
        "[u.groups.add(Group.objects.get(name='Reviewers')) for u in users]; "
        "print(' '.join(tokens.issue(u)[1] for u in users))"
    )
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=apps[0].env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    tokens = done.stdout.strip().splitlines()[-1].split()  # after shell's own banner
    assert len(tokens) == REVIEWERS
    return tokens


@pytest.fixture
def gated(scripted):
    """Install a Gate for the agent's "gated" script; always opened and removed afterwards."""

    def install(gate: Gate) -> Gate:
        scripted.gate = gate
        return gate

    yield install
    if scripted.gate is not None:
        scripted.gate.open()
    scripted.gate = None


def in_clause(values) -> str:
    return ", ".join(["%s"] * len(values))


def runs_of(app, thread_ids) -> list[dict]:
    """Every run of these threads, straight from the database (with the process that claimed it)."""
    rows = app.query(
        "SELECT t.thread_id, r.run_id, r.status, r.claimed_by, p.run_id FROM interrupts_run r "
        "JOIN interrupts_thread t ON t.id = r.thread_id LEFT JOIN interrupts_run p ON p.id = r.parent_id "
        f"WHERE t.thread_id IN ({in_clause(thread_ids)}) ORDER BY r.id",
        *thread_ids,
    )
    return [dict(zip(["thread", "run_id", "status", "claimed_by", "parent"], row, strict=False)) for row in rows]


def process_of(apps, claimed_by: str) -> int:
    """Which of ``apps`` a ``host:pid:nonce`` worker id names."""
    pid = claimed_by.rsplit(":", 2)[1]
    [index] = [n for n, app in enumerate(apps) if app.worker_pid == pid]
    return index


def start_many(apps, agents: list[str], count: int) -> list[dict]:
    """``count`` new threads on ``agents`` in turn, started at once from ``count`` threads via every process's API."""

    def one(n):
        with apps[n % len(apps)].api() as api:
            return start(api, agents[n % len(agents)], f"job {n}")

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


def all_settled(apps, thread_ids, runs_per_thread: int) -> list[dict]:
    """Wait until each thread has at least ``runs_per_thread`` runs and none is queued or streaming; its runs."""

    def check():
        found = runs_of(apps[0], thread_ids)
        per_thread = Counter(r["thread"] for r in found)
        settled = all(r["status"] not in ("queued", "streaming") for r in found)
        return settled and all(per_thread[t] >= runs_per_thread for t in thread_ids) and found

    return wait_for(check, timeout=45, interval=0.2)


def race(apps, tokens, requests) -> list[httpx.Response]:
    """POST each (interrupt, body) as its own reviewer, through process n % len(apps), all released together."""
    barrier = threading.Barrier(len(requests))

    def one(n):
        interrupt, body = requests[n]
        with httpx.Client(base_url=apps[n % len(apps)].url, headers={"Authorization": f"Token {tokens[n]}"},
                          timeout=60) as client:
            barrier.wait(timeout=60)
            return client.post(f"/api/interrupts/{interrupt['id']}/decide/", json=body)

    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(one, range(len(requests))))


def test_queued_runs_are_shared_out_and_each_is_streamed_by_exactly_one_process(apps, scripted, gated):
    gate = gated(Gate(size=NEW_RUNS))
    started = start_many(apps, GATED, NEW_RUNS)
    threads = [r["thread"] for r in started]

    # The agent holds each stream after RUN_STARTED until NEW_RUNS of them are
    # open at once: with NEW_SLOTS per process, only all three together get there.
    wait_for(lambda: gate.filled, timeout=30)
    found = all_settled(apps, threads, runs_per_thread=1)

    assert sorted((r["run_id"], r["status"]) for r in found) == sorted((r["run_id"], "interrupted") for r in started)
    assert scripted.calls_per_run(threads) == Counter(r["run_id"] for r in started)
    by_process = Counter(process_of(apps, r["claimed_by"]) for r in found)
    assert by_process == {n: NEW_SLOTS for n in range(PROCESSES)}
    with apps[2].api() as api:
        waiting = api.get("/api/interrupts/", params={"limit": 1000}).json()["results"]
    assert Counter(i["thread"] for i in waiting if i["thread"] in threads) == Counter(threads)


def test_resumes_decided_through_different_processes_are_each_sent_exactly_once(apps, scripted, gated, reviewers):
    started = start_many(apps, GATED, RUNS)
    threads = [r["thread"] for r in started]
    assert {r["status"] for r in all_settled(apps, threads, runs_per_thread=1)} == {"interrupted"}
    with apps[0].api() as api:
        waiting = {i["thread"]: i for i in api.get("/api/interrupts/", params={"limit": 1000})
                   .json()["results"]}
    asked = [waiting[t] for t in threads]

    gate = gated(Gate(size=RUNS))
    answers = race(apps, reviewers, [(i, {"action": "approve"}) for i in asked])
    assert [a.status_code for a in answers] == [201] * RUNS, [a.text for a in answers if a.status_code != 201]

    wait_for(lambda: gate.filled, timeout=30)
    found = all_settled(apps, threads, runs_per_thread=2)
    resumes = [r for r in found if r["parent"]]
    assert sorted(r["thread"] for r in resumes) == sorted(threads)  # one resume per thread
    assert {r["status"] for r in resumes} == {"succeeded"}
    assert {r["parent"] for r in resumes} == {r["run_id"] for r in started}
    # The agent got each resume once, and nothing else for these threads.
    assert scripted.calls_per_run(threads, resumes=True) == Counter(r["run_id"] for r in resumes)
    assert scripted.calls_per_run(threads, resumes=False) == Counter(r["run_id"] for r in started)
    sent = [body for _, body in list(scripted.bodies) if body.get("threadId") in threads and body.get("resume")]
    assert all(
        attested(body["resume"]) == [{"interruptId": "int-1", "status": "resolved", "payload": {"approved": True}}]
        for body in sent
    )
    assert Counter(process_of(apps, r["claimed_by"]) for r in resumes) == {n: MAX_STREAMS for n in range(PROCESSES)}


def socket(app, path: str, session: str):
    return connect(f"ws://127.0.0.1:{app.port}{path}", origin=app.url, proxy=None, open_timeout=10,
                   additional_headers={"Cookie": f"sessionid={session}"})


def receive_until(ws, done, timeout=15.0) -> list[dict]:
    """Messages from ``ws`` up to and including the first for which ``done`` is true."""
    seen = []
    while True:
        try:
            message = json.loads(ws.recv(timeout=timeout))
        except TimeoutError:
            raise AssertionError(f"no matching message within {timeout} s; got {seen}") from None
        seen.append(message)
        if done(message):
            return seen


def last_seq_of(log, run_id) -> int:
    return max(e["seq"] for e in log if e["run"] == run_id)


def type_at(log, seq) -> str:
    [found] = [e["type"] for e in log if e["seq"] == seq]
    return found


def test_a_browser_on_one_process_sees_what_another_process_streams(apps, scripted, gated):
    gate = gated(Gate())  # held until the test opens it
    with apps[0].api() as api:
        run = start(api, "x-gated")
        thread = run["thread"]
        before = wait_for(lambda: events(api, thread))  # RUN_STARTED recorded; the rest waits at the gate
        thread_pk = api.get(f"/api/threads/{thread}/").json()["id"]
    [streamed] = runs_of(apps[0], [thread])
    streamer = process_of(apps, streamed["claimed_by"])
    watcher, decider = [app for n, app in enumerate(apps) if n != streamer]
    # A session made through one process is good on another: they share the database.
    session = session_cookie(decider)

    with socket(watcher, f"/ws/threads/{thread}/", session) as on_thread, \
            socket(watcher, "/ws/inbox/", session) as on_inbox:
        hello = json.loads(on_thread.recv(timeout=10))
        assert hello == {"type": "hello", "last_seq": before[-1]["seq"]}
        assert json.loads(on_inbox.recv(timeout=10))["type"] == "pending"

        gate.open()
        with apps[streamer].api() as api:
            assert finished_run(api, run["run_id"])["status"] == "interrupted"
            log = events(api, thread)
        # Pokes, not records (one may stand for a batch of events): each names
        # a recorded event, and they reach the end of the run.
        finished_at = last_seq_of(log, run["run_id"])
        pokes = receive_until(on_thread, lambda m: m["seq"] >= finished_at)
        assert all(m["type"] == "event" and m["seq"] > hello["last_seq"] for m in pokes)
        assert [(m["seq"], m["event_type"]) for m in pokes] == [(m["seq"], type_at(log, m["seq"])) for m in pokes]
        raised = receive_until(on_inbox, lambda m: m.get("thread") == thread_pk)
        assert raised[-1]["type"] == "changed" and raised[-1]["reason"] == "raised"

        # A decision made through the third process, and the resume streamed by
        # whichever process claims it, reach the watcher's sockets too.
        with decider.api() as api:
            [asked] = pending(api, thread)
            assert api.post(f"/api/interrupts/{asked['id']}/decide/", json={"action": "approve"}).status_code == 201
            resumed = finished_run(
                api, wait_for(lambda: api.get(f"/api/interrupts/{asked['id']}/").json()["resumed_by"])
            )
            log = events(api, thread)
        assert resumed["status"] == "succeeded"
        decided = receive_until(on_inbox, lambda m: m.get("thread") == thread_pk)
        assert decided[-1]["reason"] == "decided"
        pokes = receive_until(on_thread, lambda m: m["seq"] >= last_seq_of(log, resumed["run_id"]))
        assert all(m["seq"] > finished_at for m in pokes)
        assert [(m["seq"], m["event_type"]) for m in pokes] == [(m["seq"], type_at(log, m["seq"])) for m in pokes]


def test_who_claims_and_who_looks_at_a_card_reaches_inboxes_on_every_process(apps, scripted):
    with apps[0].api() as api:
        run = start(api, "x-approve")
        assert finished_run(api, run["run_id"])["status"] == "interrupted"
        [asked] = wait_for(lambda: pending(api, run["thread"]))
    session = session_cookie(apps[1])
    with socket(apps[1], "/ws/inbox/", session) as looking, socket(apps[2], "/ws/inbox/", session) as watching:
        for ws in (looking, watching):
            assert json.loads(ws.recv(timeout=10))["type"] == "pending"
        looking.send(json.dumps({"type": "viewing", "interrupts": [asked["id"]]}))
        [*_, seen] = receive_until(watching, lambda m: m["type"] == "attention" and m["viewers"])
        assert seen["interrupt"] == asked["id"] and [v["by"] for v in seen["viewers"]] == ["reviewer"]
        with apps[0].api() as api:
            assert api.post(f"/api/interrupts/{asked['id']}/claim/", json={}).status_code == 200
        [*_, claimed] = receive_until(watching, lambda m: m["type"] == "attention" and m["claim"])
        assert claimed["claim"]["by"] == "reviewer"
        # Closing the looking page: the other process hears nobody has it open any more.
        looking.close()
        [*_, left] = receive_until(watching, lambda m: m["type"] == "attention" and not m["viewers"])
        assert left["claim"]["by"] == "reviewer"
    with apps[2].api() as api:
        assert api.get(f"/api/interrupts/{asked['id']}/").json()["claim"]["by"] == "reviewer"


def test_fifty_reviewers_racing_for_one_interrupt_store_one_decision_and_send_one_resume(apps, scripted, reviewers):
    with apps[0].api() as api:
        run = start(api, "x-approve")
        [asked] = wait_for(lambda: pending(api, run["thread"]))

    answers = race(apps, reviewers, [(asked, {"action": "approve"})] * REVIEWERS)

    assert sorted(a.status_code for a in answers) == [201] + [409] * (REVIEWERS - 1), \
        [a.text for a in answers if a.status_code not in (201, 409)]
    winner = next(a for a in answers if a.status_code == 201).json()["user"]["username"]
    for loser in (a for a in answers if a.status_code == 409):
        assert loser.json()["code"] == "ALREADY_DECIDED"
        assert loser.json()["decided_by"] == winner
    with apps[1].api() as api:
        detail = api.get(f"/api/interrupts/{asked['id']}/").json()
        assert [d["user"]["username"] for d in detail["decisions"]] == [winner]
        resumed = finished_run(api, wait_for(lambda: api.get(f"/api/interrupts/{asked['id']}/").json()["resumed_by"]))
    assert resumed["status"] == "succeeded"
    assert [r["run_id"] for r in runs_of(apps[0], [run["thread"]])] == [run["run_id"], resumed["run_id"]]
    assert scripted.calls_per_run([run["thread"]]) == {run["run_id"]: 1, resumed["run_id"]: 1}


def test_fifty_decisions_on_one_batch_at_once_send_one_resume_with_every_answer(apps, scripted, reviewers):
    with apps[0].api() as api:
        run = start(api, "x-batch-50")
        asked = wait_for(
            lambda: (
                len(
                    found := api.get("/api/interrupts/", params={"thread": run["thread"], "limit": 100}).json()[
                        "results"
                    ]
                )
                == BATCH
                and found
            )
        )

    answers = race(apps, reviewers, [(i, {"action": "approve"}) for i in asked])

    assert [a.status_code for a in answers] == [201] * BATCH, [a.text for a in answers if a.status_code != 201]
    with apps[2].api() as api:
        resumed = finished_run(
            api, wait_for(lambda: api.get(f"/api/interrupts/{asked[0]['id']}/").json()["resumed_by"])
        )
    assert resumed["status"] == "succeeded"
    expected = sorted(
        ({"interruptId": f"int-{n}", "status": "resolved", "payload": {"approved": True}} for n in range(BATCH)),
        key=lambda e: e["interruptId"],
    )
    assert sorted(attested(resumed["input"]["resume"]), key=lambda e: e["interruptId"]) == expected
    assert [r["run_id"] for r in runs_of(apps[0], [run["thread"]])] == [run["run_id"], resumed["run_id"]]
    assert scripted.calls_per_run([run["thread"]]) == {run["run_id"]: 1, resumed["run_id"]: 1}
    [sent] = [body for _, body in list(scripted.bodies) if body.get("runId") == resumed["run_id"]]
    assert sorted(attested(sent["resume"]), key=lambda e: e["interruptId"]) == expected


def test_demo_agents_keep_working_when_the_process_that_registered_them_stops(apps):
    """Every process serves the demo agents and calls its own: none depends on another being up."""
    with apps[0].api() as api:
        registered = api.get("/api/agents/mailer/").json()["url"]
    holder = next(app for app in apps if registered.startswith(app.url))
    survivors = [app for app in apps if app is not holder]
    holder.stop()  # last test of the module: the others no longer need it
    for app in survivors:
        with app.api() as api:
            thread = start(api, "mailer", "Email c@d.com about lunch")["thread"]
            asked = wait_for(lambda thread=thread: pending(api, thread), timeout=20)
            assert asked[0]["tool_name"] == "sendEmail"
