"""Decisions an agent got that nobody was told of: racing reviewers, kill -9 twice, every 2xx answer compared.

Not collected by pytest (minutes on a loaded machine). Run it from the repository root:
``.venv/bin/python -c "from tests.e2e import stress_mismatch as s; s.main(20, 8, 2)"`` (threads, reviewers,
kills; DATABASE_URL for PostgreSQL). Each DIFF line is an interrupt whose resume entry differs from the
last 2xx decision answer for it; before the fix every one was a decision committed by a process killed
before its answer was sent (acks: []), which the batch's resume then carried to the agent.

Measured (20 threads, 100 interrupts, 8 reviewers, 2 kills): before, SQLite 2 differing (both unanswered
decisions sent); after, SQLite 0 of that kind (4 unanswered decisions taken back), and PostgreSQL 0
differing (3 taken back). What may still differ is a resume killed mid-send (WORKER_LOST: never sent
again), whose acknowledged answers show as "received: []".
"""

import random
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx

from ..loopback import LoopbackAgent, frame, stream
from ..servers import ServedApp, manage

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
          "required": ["approved"]}
ROUNDS = [3, 2]


class Counting(LoopbackAgent):
    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()
        self.bodies = []
        self.resumes = defaultdict(int)

    def answer(self, handler, path, body):
        with self.lock:
            self.bodies.append((time.time(), body))
            thread = body["threadId"]
            if body.get("resume"):
                self.resumes[thread] += 1
            n = self.resumes[thread]
        start = {"type": "RUN_STARTED", "threadId": thread, "runId": body["runId"]}
        end = {"type": "RUN_FINISHED", "threadId": thread, "runId": body["runId"]}
        if n < len(ROUNDS):
            end["outcome"] = {"type": "interrupt", "interrupts": [
                {"id": f"int-{n}-{k}", "reason": "confirmation", "message": f"Round {n} step {k}?",
                 "responseSchema": SCHEMA} for k in range(ROUNDS[n])]}
        else:
            end["outcome"] = {"type": "success"}
        time.sleep(random.random() * 0.05)
        stream(handler, [frame(start), frame(end)])


def users(app, count):
    code = (
        "from django.contrib.auth import get_user_model; from django.contrib.auth.models import Group; "
        "from interrupts.hub import tokens; U = get_user_model(); "
        "g = Group.objects.get(name='Reviewers')\n"
        f"for i in range({count}):\n"
        "    u, _ = U.objects.get_or_create(username=f'r{i}'); u.groups.add(g); u.set_password('pw'); u.save()\n"
        "    print('TOKEN', tokens.issue(u)[1])"
    )
    done = manage("shell", "-c", code, env=app.env)
    assert done.returncode == 0, done.stderr
    return [line.split()[1] for line in done.stdout.splitlines() if line.startswith('TOKEN ')]


def main(threads=30, reviewers=10, kills=2):
    workdir = Path(tempfile.mkdtemp(prefix="stress-"))
    agent = Counting().start()
    env = dict(COUNTERSIGN_POLL_INTERVAL="0.2", COUNTERSIGN_LEASE_SECONDS="2", COUNTERSIGN_ACK_GRACE_SECONDS="10",
               COUNTERSIGN_SWEEP_INTERVAL="1")
    app = ServedApp(workdir, **env).start()
    tokens = users(app, reviewers)
    base = {"url": app.url}
    with app.api() as api:
        assert api.post("/api/agents/", json={"name": "counting", "url": f"{agent.url}/c/"}).status_code == 201
        _thread_ids = [api.post("/api/threads/", json={"agent": "counting"}).json()["thread"] for _ in range(threads)]
    acks = []  # (t0, t1, user, pk, status, body)
    stop = threading.Event()

    def reviewer(i):
        rnd = random.Random(i)
        while not stop.is_set():
            try:
                with httpx.Client(
                    base_url=base["url"], headers={"Authorization": f"Token {tokens[i]}"}, timeout=10
                ) as c:
                    listed = c.get("/api/interrupts/", params={"limit": 50}).json()["results"]
                    if not listed:
                        time.sleep(0.05)
                        continue
                    target = rnd.choice(listed)
                    action = rnd.choice(["approve", "reject", "respond", "respond"])
                    body = {"action": action}
                    if action == "respond":
                        body["payload"] = {"approved": rnd.random() < 0.5, "note": f"r{i}-{rnd.randrange(10**6)}"}
                    t0 = time.time()
                    try:
                        r = c.post(f"/api/interrupts/{target['id']}/decide/", json=body)
                        acks.append(
                            (
                                t0,
                                time.time(),
                                i,
                                target["id"],
                                r.status_code,
                                r.json() if r.status_code < 500 else r.text,
                                body,
                            )
                        )
                    except httpx.HTTPError as e:
                        acks.append((t0, time.time(), i, target["id"], None, repr(e), body))
            except Exception:  # server down
                time.sleep(0.05)

    workers = [threading.Thread(target=reviewer, args=(i,), daemon=True) for i in range(reviewers)]
    for w in workers:
        w.start()
    for k in range(kills):
        target = (k + 1) * 40
        waited = time.time()
        while sum(1 for a in acks if a[4] == 201) < target:
            time.sleep(0.01)
            if time.time() - waited > 20:
                from collections import Counter
                print(Counter(a[4] for a in acks), [a for a in acks if a[4] != 201][:3], flush=True)
                waited = time.time()
        time.sleep(random.random() * 0.05)
        app.process.kill()
        app.process.wait()
        print("killed at", len(acks))
        again = ServedApp(workdir, **env)
        again.port, again.url, again.log, again.token = app.port, app.url, workdir / f"serve{k}.log", app.token
        app = again.prepare().launch().ready(timeout=180)
    deadline = time.time() + 120
    while time.time() < deadline:
        rows = app.query("SELECT count(*) FROM interrupts_run WHERE status IN ('queued','streaming')")
        pend = app.query("SELECT count(*) FROM interrupts_interrupt WHERE status='pending'")
        if rows[0][0] == 0 and pend[0][0] == 0:
            break
        time.sleep(0.5)
    stop.set()
    for w in workers:
        w.join(5)
    import pickle
    pickle.dump((acks, agent.bodies), open(workdir / "data.pkl", "wb"))
    print("workdir", workdir, flush=True)
    # Map interrupt pk -> (thread, run, interrupt_id).
    meta = {pk: (t, r, iid) for pk, t, r, iid in app.query(
        "SELECT i.id, th.thread_id, ru.run_id, i.interrupt_id FROM interrupts_interrupt i "
        "JOIN interrupts_run ru ON ru.id=i.run_id JOIN interrupts_thread th ON th.id=ru.thread_id")}
    acked = defaultdict(list)
    for _t0, t1, user, pk, status, body, _sent in acks:
        if status in (200, 201):
            acked[meta[pk]].append((t1, user, body["status"], body["payload"]))
    received = defaultdict(list)
    for _t, body in agent.bodies:
        for e in body.get("resume") or []:
            received[(body["threadId"], body["parentRunId"], e["interruptId"])].append(
                (body["runId"], e["status"], e.get("payload")))
    differ = 0
    for key in sorted(set(acked) | set(received)):
        a = acked.get(key, [])
        got = received.get(key, [])
        last = (a[-1][2], a[-1][3]) if a else None
        ok = bool(got) and all((s, p) == last for _, s, p in got)
        if not ok:
            differ += 1
            print("DIFF", key, "acks:", a, "received:", got)
    errors = [a for a in acks if a[4] is None or a[4] >= 500]
    print(f"acks={sum(1 for a in acks if a[4] in (200, 201))} errors={len(errors)} differ={differ} "
          f"interrupts={len(meta)} resumes={sum(1 for _, b in agent.bodies if b.get('resume'))}")
    for e in errors:
        print("ERR", e)
    print(app.query("SELECT status, error_code, count(*) FROM interrupts_run GROUP BY 1,2"))
    app.stop()


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
