"""The trail proves what reviewers saw, and a deleted tail is found against a head kept outside.

Tampering is done as in ``test_trail``: raw SQL, the guarding triggers
taken away first, inside the test's transaction.
"""

import csv
import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from interrupts.hub import decisions, policies
from interrupts.hub.trail import backfill, content
from interrupts.hub.trail import chain as trail_chain
from interrupts.models import Agent, AuditCheckpoint, AuditEntry, Decision, Delivery, Policy, Webhook

from .. import factories as make
from . import test_trail
from .test_trail import (
    entry_of,
    pending,
    problems,
    raw,
    recorded,
    rewrite_whole_chain,
    unguard,
    verify,
)

chain = test_trail.chain  # the fixture, shared with test_trail

pytestmark = pytest.mark.django_db


def verify_expecting(*heads) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = [arg for head in heads for arg in ("--expect-head", str(head))]
    try:
        call_command("audit", "verify", *args, stdout=out, stderr=err)
        return 0, out.getvalue(), err.getvalue()
    except SystemExit as exit:
        return exit.code, out.getvalue(), err.getvalue()


def newest() -> trail_chain.Head:
    last = AuditEntry.objects.order_by("-seq").first()
    return trail_chain.Head(last.seq, last.hash)


def decide_more(count: int) -> list[Decision]:
    """``count`` more decisions, each its own entry at the chain's end (and nothing else)."""
    reviewer = get_user_model().objects.get(username="bob")
    thread = make.thread(agent=Agent.objects.order_by("pk").first())  # a new agent would be an entry too
    made = []
    for n in range(count):
        made.append(recorded(decisions.decide(pending(make.run(thread, status="interrupted"), f"int-more-{n}"),
                                              reviewer, "resolved", {"approved": True})))
    return made


def delete_after(seq: int) -> None:
    unguard("interrupts_auditentry")
    raw("DELETE FROM interrupts_auditentry WHERE seq > %s", [seq])


def exported_heads(client) -> dict[str, str]:
    """The head each audit export carries, as a person downloading it keeps it."""
    as_json = client.get("/audit/?format=json")
    as_csv = client.get("/audit/?format=csv")
    chain_file = client.get("/audit/?format=chain", follow=True)
    rows = json.loads(b"".join(as_json.streaming_content))
    table = list(csv.DictReader(io.StringIO(b"".join(as_csv.streaming_content).decode())))
    document = json.loads(b"".join(chain_file.streaming_content))
    assert {row["auditHead"] for row in rows} == {row["auditHead"] for row in table} == {
        as_json["Countersign-Audit-Head"]}
    last = document["entries"][-1]
    return {"json": rows[0]["auditHead"], "csv": table[0]["auditHead"], "header": as_csv["Countersign-Audit-Head"],
            "chain": chain_file["Countersign-Audit-Head"], "chain-last-line": f"{last['seq']}:{last['hash']}"}


# --- the head, anchored outside the database ---------------------------------------------


def test_every_export_and_the_command_carry_the_head_and_an_untouched_trail_verifies_against_them(chain, client):
    client.force_login(make.user(is_staff=True))
    heads = exported_heads(client)
    assert set(heads.values()) == {str(newest())}
    out = io.StringIO()
    call_command("audit", "head", stdout=out)
    assert out.getvalue().strip() == str(newest())
    code, out, err = verify_expecting(*{trail_chain.Head.parse(h) for h in heads.values()})
    assert code == 0, err
    assert out.strip() == f"verified {newest().seq} entries, head {newest()}"


def test_a_webhook_delivery_carries_the_head_its_own_decision_made(chain):
    Webhook.objects.create(name="all", url="http://127.0.0.1:9/hook")
    [decision] = decide_more(1)
    body = json.loads(Delivery.objects.get(key=f"decided:decision:{decision.pk}").body)
    mine = entry_of(decision)
    assert body["auditHead"] == {"seq": mine.seq, "hash": mine.hash} == newest().as_dict()
    assert verify_expecting(trail_chain.Head(**body["auditHead"]))[0] == 0


def test_deleting_the_newest_entries_after_the_last_checkpoint_fails_against_a_head_seen_outside(chain, client):
    client.force_login(make.user(is_staff=True))
    assert verify()[0] == 0
    checkpoint = AuditCheckpoint.objects.get().seq
    later = decide_more(3)
    seen = trail_chain.Head.parse(exported_heads(client)["json"])
    assert seen == newest() and seen.seq == checkpoint + 3
    # Someone with the database's keys takes the three decisions back, rows and entries.
    unguard("interrupts_decision")
    raw("DELETE FROM interrupts_decision WHERE id IN (%s, %s, %s)", [d.pk for d in later])
    delete_after(checkpoint)
    # The database alone cannot tell: what is left is a whole chain through the checkpoint.
    assert verify()[0] == 0
    code, _, err = verify_expecting(seen)
    assert (code, problems(err)) == (1, [
        f"BROKEN: entry {seen.seq}, the head expected ({seen}), is missing: the trail ends at entry {checkpoint}, "
        "so its newest 3 entries were deleted"])


def test_a_tail_cut_below_the_checkpoint_is_named_and_the_checkpoint_does_not_follow_it_back(chain):
    assert verify()[0] == 0
    verified = AuditCheckpoint.objects.get()
    delete_after(verified.seq - 2)
    for _ in range(2):  # before, the first failure moved the checkpoint back and the second run passed
        code, _, err = verify()
        assert code == 1
        assert problems(err)[0].startswith(f"BROKEN: entry {verified.seq}, verified at ")
        assert (AuditCheckpoint.objects.get().seq, AuditCheckpoint.objects.get().hash) == (verified.seq,
                                                                                          verified.hash)


def test_a_chain_rewritten_whole_fails_against_a_head_seen_before(chain):
    seen = newest()
    unguard("interrupts_auditentry")
    raw("DELETE FROM interrupts_auditcheckpoint")  # the checkpoint lives in the same database: rewritten too
    prev = rewrite_whole_chain()
    code, _, err = verify_expecting(seen)
    assert code == 1
    assert problems(err)[0] == (f"BROKEN: entry {seen.seq} is not the head expected ({seen}): its hash is now "
                                f"{prev} (the chain was rewritten up to there)")


def test_a_head_that_is_not_one_is_refused_plainly():
    with pytest.raises(CommandError, match="expected SEQ:sha256:<64 hex digits>"):
        call_command("audit", "verify", "--expect-head", "12:abc")


def test_each_checkpoint_logs_its_head(chain, caplog):
    with caplog.at_level("INFO", logger="interrupts.hub.trail"):
        assert verify()[0] == 0
    assert f"audit trail verified (whole) through head {newest()}" in caplog.text


# --- what the reviewer read -----------------------------------------------------------------


def test_a_decision_entry_cites_the_policy_version_it_was_taken_under(chain):
    policy = make.policy(name="mail", tool_name="sendEmail")
    policy.required_approvals = 1
    policy.allow_self_approval = True
    policies.save(policy)
    cited = AuditEntry.objects.filter(subject=f"policy:{policy.pk}").order_by("-seq").first()
    reviewer = get_user_model().objects.get(username="bob")
    ruled = recorded(decisions.decide(pending(make.run(status="interrupted"), "int-mail", tool_name="sendEmail"),
                                      reviewer, "resolved", {"approved": True}))
    data = json.loads(entry_of(ruled).content)["data"]
    assert (data["policy"], data["policyVersion"]) == ("mail", {"policy": policy.pk, "seq": cited.seq,
                                                                "hash": cited.hash})
    default = json.loads(entry_of(Decision.objects.get(interrupt__interrupt_id="int-b")).content)["data"]
    assert (default["policy"], default["policyVersion"]) == ("site default", None)
    # A later change of the policy is a later version, not a mismatch.
    policies.delete(Policy.objects.get(pk=policy.pk))
    assert verify()[0] == 0


def test_the_subagent_a_reviewer_was_shown_is_held_to_the_events_that_named_it(chain):
    run = make.run(status="interrupted")
    started = make.event(run, 1, "SUBAGENT_STARTED", payload={
        "type": "SUBAGENT_STARTED", "subagentRunId": "sub-1", "name": "researcher"})
    make.event(run, 2, "SUBAGENT_FINISHED", payload={
        "type": "SUBAGENT_FINISHED", "subagentRunId": "sub-1",
        "outcome": {"type": "suspended", "interruptIds": ["int-sub"]}})
    ruled = recorded(decisions.decide(pending(run, "int-sub"), get_user_model().objects.get(username="bob"),
                                      "resolved", {"approved": True}))
    assert json.loads(entry_of(ruled).content)["data"]["subagent"] == {"runId": "sub-1", "name": "researcher"}
    assert verify()[0] == 0
    raw("DELETE FROM interrupts_event WHERE id = %s", [started.pk])
    code, _, err = verify()
    assert (code, problems(err)) == (1, [
        f"BROKEN: entry {entry_of(ruled).seq}: decision {ruled.pk} (int-sub in thread {run.thread.thread_id}, "
        "by bob) no longer matches what was recorded (the subagent attribution (subagent) changed in the row)"])


def test_entries_written_before_they_held_the_message_verify_by_the_rule_they_were_written_under(chain):
    # An entry of the earlier format (no message, schema, metadata, expiry,
    # subagent or policy version), as an upgraded database holds it.
    old_keys = set(content.DECISION_ADDED[5:]) | {content.POLICY_VERSION}
    reviewer = get_user_model().objects.get(username="bob")
    old = make.decision(pending(make.run(status="interrupted"), "int-old", message="Pay 10 EUR?"), reviewer)
    data = {k: v for k, v in content.decision_content(old).items() if k not in old_keys}
    trail_chain.record(trail_chain.DECISION, data, subject=f"decision:{old.pk}", decision=old, interrupt=old.interrupt)
    new = recorded(decisions.decide(pending(make.run(status="interrupted"), "int-new", message="Pay 10 EUR?"),
                                    reviewer, "resolved", {"approved": True}))
    assert verify()[0] == 0
    unguard("interrupts_interrupt")
    raw("UPDATE interrupts_interrupt SET message = %s WHERE id IN (%s, %s)",
        ["Pay 10,000 EUR?", old.interrupt_id, new.interrupt_id])
    code, _, err = verify()
    # The old entry never held the message: only the new one can tell.
    assert (code, [p.split(": decision")[1].split(" (")[0] for p in problems(err)]) == (1, [f" {new.pk}"])
    assert "(the message (messageDigest) changed in the row)" in problems(err)[0]


def test_the_upgrade_completes_older_entries_so_their_message_is_held_from_then_on(chain):
    from django.db import connection
    from django.db.migrations.loader import MigrationLoader

    # The models as migration 0026 sees them, not today's.
    apps = MigrationLoader(connection).project_state(("interrupts", "0026_trail_decision_context")).apps
    reviewer = get_user_model().objects.get(username="bob")
    old = make.decision(pending(make.run(status="interrupted"), "int-old", message="Pay 10 EUR?",
                                metadata={"invoice": 7}), reviewer)
    data = {k: v for k, v in content.decision_content(old).items() if k not in set(content.DECISION_ADDED[5:])}
    trail_chain.record(trail_chain.DECISION, data, subject=f"decision:{old.pk}", decision=old, interrupt=old.interrupt)
    assert backfill.backfill_context(apps) == 1  # what migration 0026 runs
    assert backfill.backfill_context(apps) == 0  # once is enough
    assert verify()[0] == 0
    unguard("interrupts_interrupt")
    raw("UPDATE interrupts_interrupt SET message = %s, metadata = %s WHERE id = %s",
        ["Pay 10,000 EUR?", '{"invoice": 8}', old.interrupt_id])
    code, _, err = verify()
    assert (code, problems(err)) == (1, [
        f"BROKEN: entry {entry_of(old).seq}: decision {old.pk} (int-old in thread "
        f"{old.interrupt.run.thread.thread_id}, by bob) no longer matches what was recorded (the message "
        "(messageDigest), the interrupt's metadata (metadataDigest) changed in the row)"])


def test_a_tail_cut_under_a_webhook_delivery_that_carried_it_is_found_without_being_asked(chain):
    assert verify()[0] == 0
    checkpoint = AuditCheckpoint.objects.get().seq
    Webhook.objects.create(name="all", url="http://127.0.0.1:9/hook")
    later = decide_more(2)
    delivered = trail_chain.Head(**json.loads(Delivery.objects.order_by("-pk").first().body)["auditHead"])
    assert delivered == newest()
    unguard("interrupts_decision")
    raw("DELETE FROM interrupts_decision WHERE id IN (%s, %s)", [d.pk for d in later])
    delete_after(checkpoint)
    # The receivers hold that head; the delivery row, left behind, says so too.
    code, _, err = verify()
    assert (code, problems(err)) == (1, [
        f"BROKEN: the newest webhook delivery carried head {delivered}: entry {delivered.seq}, the head expected "
        f"({delivered}), is missing: the trail ends at entry {checkpoint}, so its newest "
        f"{delivered.seq - checkpoint} entries were deleted"])
