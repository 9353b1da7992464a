"""Webhooks end to end: a real receiver process gets each event once, signed, and a delivery made while it was
down arrives once it is back, on the same port.

The hub is `manage.py serve` (daphne and its supervisor); the agent is the built-in demo mailer; the receiver
is tests/external/webhook_receiver.py, a process of its own that writes every POST it gets to a file, so what
it received survives its being killed.
"""

import base64
import json
import subprocess
import sys

import pytest

from interrupts.sdk.verify import check_signature

from ..servers import ROOT, ServedApp, free_port, stop_process
from .conftest import decide, finished_run, pending, start, wait_for


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    app = ServedApp(tmp_path_factory.mktemp("webhooks"), self_approving=True, COUNTERSIGN_POLL_INTERVAL="0.2",
                    COUNTERSIGN_WEBHOOK_RETRY_BASE="0.5", COUNTERSIGN_WEBHOOK_RETRY_MAX_DELAY="1").start()
    yield app
    app.stop()


class Receiver:
    def __init__(self, port: int, record) -> None:
        self.port, self.record, self.process = port, record, None
        self.url = f"http://127.0.0.1:{port}/hooks/countersign"

    def start(self) -> "Receiver":
        log = self.record.with_suffix(".log")
        with open(log, "w") as out:
            self.process = subprocess.Popen([sys.executable, "tests/external/webhook_receiver.py", "--port",
                                             str(self.port), "--record", str(self.record)],
                                            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        wait_for(lambda: "ready on" in log.read_text() or self.process.poll() is not None, timeout=20)
        assert self.process.poll() is None, log.read_text()
        return self

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)

    def received(self, event: str | None = None) -> list[dict]:
        if not self.record.exists():
            return []
        lines = [json.loads(line) for line in self.record.read_text().splitlines() if line]
        return [line for line in lines if event is None or line["headers"]["Countersign-Event"] == event]


@pytest.fixture
def receiver(tmp_path):
    made = Receiver(free_port(), tmp_path / "deliveries.jsonl").start()
    yield made
    stop_process(made.process)


def deliveries(api, webhook):
    return api.get("/api/deliveries/", params={"webhook": webhook}).json()["results"]


def test_each_event_arrives_once_signed_and_a_delivery_made_while_the_receiver_was_down_arrives_when_it_is_back(
        hub, receiver):
    with hub.api() as api:
        created = api.post("/api/webhooks/", json={"name": "team-hook", "url": receiver.url,
                                                   "events": ["raised", "decided"]})
        assert created.status_code == 201, created.text
        secret = created.json()["secret"]

        run = start(api, "mailer", "Email c@d.com about lunch")
        assert finished_run(api, run["run_id"])["status"] == "interrupted"
        [asked] = wait_for(lambda: pending(api, run["thread"]))
        [raised] = wait_for(lambda: receiver.received("raised"))
        body = base64.b64decode(raised["body"])
        assert check_signature(secret, raised["headers"]["Countersign-Signature"], body) > 0
        sent = json.loads(body)
        assert (sent["type"], sent["interrupt"]["interruptId"], sent["agent"]["name"]) == (
            "interrupt.raised", asked["interrupt_id"], "mailer")
        assert sent["thread"]["threadId"] == run["thread"] and raised["path"] == "/hooks/countersign"

        receiver.kill()
        decide(api, asked, action="approve")
        # Tried while the receiver is down: it waits, with what went wrong.
        failed = wait_for(lambda: [d for d in deliveries(api, "team-hook")
                                   if d["event"] == "decided" and d["attempts"] >= 1 and d["last_error"]])
        assert failed[0]["status"] in ("queued", "sending")

        receiver.start()  # the same port, the same record
        [decided] = wait_for(lambda: receiver.received("decided"), timeout=20)
        body = base64.b64decode(decided["body"])
        assert check_signature(secret, decided["headers"]["Countersign-Signature"], body) > 0
        assert json.loads(body)["decision"]["action"] == "approve"
        wait_for(lambda: all(d["status"] == "delivered" for d in deliveries(api, "team-hook")))

        # A later event arrives: the loop has had its rounds since, and sent nothing again.
        later = start(api, "mailer", "Email e@f.com about dinner")
        assert finished_run(api, later["run_id"])["status"] == "interrupted"
        wait_for(lambda: len(receiver.received("raised")) == 2)
        ids = [line["headers"]["Countersign-Delivery"] for line in receiver.received()]
        assert sorted(ids) == sorted(set(ids)) and len(ids) == 3
        listed = deliveries(api, "team-hook")
        assert [d["attempts"] for d in listed if d["event"] == "raised"] == [1, 1]
        [decided] = [d for d in listed if d["event"] == "decided"]
        assert decided["attempts"] >= 2 and [t["response_status"] for t in decided["tries"]][-1] == 200
