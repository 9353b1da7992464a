"""GET /api/audit/export/: the whole chain, as a file that verifies offline and fails after any one byte changes."""

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from interrupts.hub import decisions, outbox
from interrupts.hub.trail import chain
from interrupts.models import AuditEntry, Run
from interrupts.protocol import signing, trail

from .. import factories as make
from ..sdk.test_passkeys import Authenticator

pytestmark = pytest.mark.django_db

URL = "/api/audit/export/"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def recorded():
    """A trail with a policy, an agent and a decision in it."""
    reviewer = make.user(is_superuser=True)
    make.policy(name="ops")
    interrupt = make.interrupt(make.run(status="interrupted"))
    decisions.decide(interrupt, reviewer, "resolved", {"approved": True})
    assert AuditEntry.objects.count() >= 3
    return reviewer


def exported(client, user, **params) -> tuple[bytes, str]:
    client.force_login(user)
    response = client.get(URL, params)
    assert response.status_code == 200
    return b"".join(response.streaming_content), response[trail.HEAD_HEADER]


def test_the_json_export_holds_the_whole_chain_to_its_head_and_verifies(client, recorded):
    data, head = exported(client, recorded)
    checked = trail.check_export(data)
    assert checked.ok, checked.problems
    assert (checked.entries, f"{checked.head['seq']}:{checked.head['hash']}") == (AuditEntry.objects.count(), head)
    assert head == str(chain.head())


def test_changing_any_one_byte_of_it_fails_the_check(client, recorded):
    data, _ = exported(client, recorded)
    # Every byte of the head and the last entry (the decision), and ~300 spread over the rest (every byte
    # of all of it holds too, but takes a minute: the whole file is read and re-spelt each time).
    tail = data.rindex(b'{"content"')
    positions = sorted({*range(0, tail, max(1, tail // 300)), *range(tail, len(data))})
    survived = [i for i in positions if trail.check_export(data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:]).ok]
    assert survived == []
    # Entries cut from the end are found too, by the head the file carries.
    document = json.loads(data)
    document["entries"].pop()
    assert "cut or added" in " ".join(trail.check_export(trail.canonical(document)).problems)


def test_the_offline_checker_runs_without_django_and_says_so(client, recorded, tmp_path):
    data, head = exported(client, recorded)
    good, bad = tmp_path / "trail.json", tmp_path / "edited.json"
    good.write_bytes(data)
    bad.write_bytes(data.replace(b'"kind":"decision"', b'"kind":"decisioN"', 1))

    def check(path):
        code = (f"import sys, runpy; sys.argv = ['verify_export', {str(path)!r}]\n"
                "try:\n    runpy.run_module('interrupts.verify_export', run_name='__main__')\n"
                "finally:\n    print('django loaded' if 'django' in sys.modules else 'no django')\n")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                              env={"PATH": "/usr/bin:/bin"}, cwd=ROOT)

    ok = check(good)
    assert (ok.returncode, ok.stdout.splitlines()) == (0, [f"verified {json.loads(data)['head']['seq']} entries, "
                                                           f"head {head}", "no django"]), ok.stderr
    broken = check(bad)
    assert broken.returncode == 1 and "DOES NOT VERIFY" in broken.stdout and "no django" in broken.stdout


def test_the_csv_export_has_a_row_per_entry_that_rebuilds_the_chain(client, recorded):
    client.force_login(recorded)
    response = client.get(URL, {"format": "csv"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(rows) == AuditEntry.objects.count()
    prev = trail.GENESIS
    for row in rows:
        assert (row["prev_hash"], trail.entry_hash(prev, row["content"])) == (prev, row["hash"])
        assert row["audit_head"] == response[trail.HEAD_HEADER]
        prev = row["hash"]


def test_the_audit_page_s_chain_download_is_the_same_file(client, recorded):
    data, _ = exported(client, recorded)
    page = client.get("/audit/", {"format": "chain"}, follow=True)
    assert b"".join(page.streaming_content) == data
    assert 'href="/api/audit/export/"' in client.get("/audit/").content.decode()


def test_only_people_logged_in_may_export(client, recorded):
    assert client.get(URL).status_code in (401, 403)


def test_a_passkey_countersignature_in_the_trail_is_checked_offline_against_its_decision(client, recorded):
    interrupt = make.interrupt(make.run(status="interrupted"), tool_call_id="tc-9")
    run = interrupt.run
    answer = signing.fingerprint(thread_id=run.thread.thread_id, run_id=run.run_id,
                                 interrupt_id=interrupt.interrupt_id, tool_call_id="tc-9", status="resolved",
                                 payload={"approved": True})
    key = Authenticator()
    signed = make.decision(interrupt, recorded, payload={"approved": True}, action="approve",
                           passkey=key.countersign(answer))
    chain.record_decision(signed)
    data, _ = exported(client, recorded)
    assert trail.check_export(data).ok
    # A decision whose passkey signed another answer is named, even in a chain whose links all hold.
    other = make.interrupt(make.run(status="interrupted"))
    forged = make.decision(other, recorded, payload={"approved": True}, action="approve",
                           passkey=key.countersign(answer))
    chain.record_decision(forged)
    data, _ = exported(client, recorded)
    [problem] = trail.check_export(data).problems
    assert "passkey assertion does not countersign its decision" in problem


def sent_resume(reviewer, answer: dict) -> tuple[Run, bytes]:
    """A decision, and its resume as the outbox sends it: signed over its bytes, recorded with the delivery mark."""
    interrupt = make.interrupt(make.run(status="interrupted"))
    decisions.decide(interrupt, reviewer, "resolved", answer)
    resume = Run.objects.select_related("agent").get(parent=interrupt.run, resume_key__isnull=False)
    Run.objects.filter(pk=resume.pk).update(status="streaming", claimed_by="w")
    body = json.dumps(resume.input, separators=(",", ":")).encode()
    assert outbox.mark_sent(resume, "w", body, signing.sign(resume.agent.signing_secret, body, 1_700_000_000))
    return resume, body


def test_each_resume_sent_is_checked_offline_against_its_decision_and_with_its_agent_s_secret(
        client, recorded, tmp_path):
    resume, _ = sent_resume(recorded, {"approved": True})
    data, _ = exported(client, recorded)
    export, secrets = tmp_path / "trail.json", tmp_path / "secrets.json"
    export.write_bytes(data)

    def check(*more):
        return subprocess.run([sys.executable, "-m", "interrupts.verify_export", str(export), *more],
                              capture_output=True, text=True, check=False, env={"PATH": "/usr/bin:/bin"}, cwd=ROOT)

    unsigned = check()
    assert unsigned.returncode == 0, unsigned.stdout
    assert unsigned.stdout.splitlines()[1:] == [
        "1 resumes sent, each answer in them one a decision or expiry took; 0 signatures checked",
        f"signatures not checked for {resume.agent.name}: no secret given (--secrets)"]
    # Every secret the agent had, a year-old signature: checked with no age limit.
    secrets.write_text(json.dumps({resume.agent.name: ["css_rotated_away", resume.agent.signing_secret]}))
    signed = check("--secrets", str(secrets))
    assert (signed.returncode, signed.stdout.splitlines()[1:]) == (0, [
        "1 resumes sent, each answer in them one a decision or expiry took; 1 signatures checked"])
    secrets.write_text(json.dumps({resume.agent.name: "css_someone_else_s"}))
    forged = check("--secrets", str(secrets))
    assert forged.returncode == 1 and "resume signature does not verify" in forged.stdout
    secrets.write_text('["not", "a", "map"]')
    unreadable = check("--secrets", str(secrets))
    assert unreadable.returncode == 2 and "expected" in unreadable.stderr


def test_a_resume_carrying_an_answer_nobody_decided_is_named():
    reviewer = make.user(is_superuser=True)
    resume, body = sent_resume(reviewer, {"approved": True})
    # A resume whose answer was changed after the decision (say, in the outbox's row): in the chain as sent.
    tampered = json.loads(body)
    tampered["resume"][0]["payload"] = {"approved": True, "note": "and delete the backups"}
    again = Run.objects.select_related("agent").get(pk=resume.pk)
    Run.objects.filter(pk=resume.pk).update(status="streaming", claimed_by="w")
    outbox.mark_sent(again, "w", json.dumps(tampered).encode(), "t=1,v1=00")
    head = chain.head()
    data = b"".join(trail.export_chunks(head.as_dict(), chain.export(head)))
    [problem] = trail.check_export(data).problems
    assert f"sends interrupt {tampered['resume'][0]['interruptId']!r} an answer no decision before it took" in problem


def test_a_file_nested_too_deeply_is_refused_as_not_json_not_crashed_on(tmp_path, capsys):
    deep = b"[" * 100_000 + b"]" * 100_000
    assert trail.check_export(deep).problems == ["the file is not JSON: it is nested too deeply"]
    # Inside an entry whose hash holds, too: named as that entry's problem.
    content = "[" * 100_000 + "]" * 100_000
    entry = {"content": content, "hash": trail.entry_hash(trail.GENESIS, content), "kind": "decision",
             "prevHash": trail.GENESIS, "seq": 1, "subject": "interrupt:1"}
    document = trail.canonical({"entries": [entry], "format": trail.EXPORT_FORMAT,
                                "head": {"hash": entry["hash"], "seq": 1}})
    assert trail.check_export(document).problems == ["entry 1's content is not JSON"]
    (tmp_path / "deep.json").write_bytes(deep)
    assert trail.main([str(tmp_path / "deep.json"), "--secrets", str(tmp_path / "deep.json")]) == 2
    assert "it is nested too deeply" in capsys.readouterr().err
