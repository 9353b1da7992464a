"""The audit trail: a chain built from real decisions verifies, and each kind of tampering is named.

Tampering is done the way a DBA would: with raw SQL, the guarding trigger
dropped (SQLite) or disabled (PostgreSQL) first. The DDL is inside the
test's transaction, so it is rolled back with everything else.
"""

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from interrupts import decisions, trail
from interrupts.models import AuditCheckpoint, AuditEntry, Decision, Interrupt

from .. import factories as make

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


def recorded(decision: Decision) -> Decision:
    # Until decisions.decide appends its own entry, the test does what it will.
    if not AuditEntry.objects.filter(decision_id=decision.pk, kind=trail.DECISION).exists():
        trail.record_decision(decision)
    return decision


def pending(run, interrupt_id: str, **fields) -> Interrupt:
    raw = {"id": interrupt_id, "reason": "confirmation", "responseSchema": SCHEMA}
    return make.interrupt(run, interrupt_id=interrupt_id, raw=raw, response_schema=SCHEMA, **fields)


@pytest.fixture
def chain():
    """Decisions on a two-interrupt batch (one revised), an expiry, a policy and an agent change."""
    alice, bob = make.user(username="alice"), make.user(username="bob")
    run = make.run(status="interrupted")
    first, second = pending(run, "int-a"), pending(run, "int-b")
    recorded(decisions.decide(first, alice, "resolved", {"approved": True}))
    # The batch is not sent yet (int-b is open): alice may change her mind.
    recorded(decisions.decide(first, alice, "resolved", {"approved": False}, comment="on second thoughts"))
    recorded(decisions.decide(second, bob, "resolved", {"approved": True}))
    late = pending(make.run(status="interrupted"), "int-late", expires_at=timezone.now() - timedelta(minutes=1))
    decisions.expire_due()
    if not AuditEntry.objects.filter(interrupt_id=late.pk, kind=trail.EXPIRY).exists():
        trail.record_expiry(late)
    make.policy(name="payments", groups=[Group.objects.get(name="Reviewers")], users=[bob, alice])
    agent = run.agent
    agent.url = "http://127.0.0.1:9/moved/"
    agent.save()
    return run


def verify() -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("audit", "verify", stdout=out, stderr=err)
        code = 0
    except SystemExit as exit:
        code = exit.code
    return code, out.getvalue(), err.getvalue()


def first_problem(err: str) -> str:
    return err.splitlines()[0]


def raw(sql: str, params=()) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def unguard(table: str) -> None:
    """Take away a table's immutability triggers, as someone with the database's keys can."""
    if connection.vendor == "postgresql":
        # Django's foreign keys are deferred: their checks, queued in this
        # transaction, must run before PostgreSQL lets a table's triggers change.
        raw("SET CONSTRAINTS ALL IMMEDIATE")
        raw(f"ALTER TABLE {table} DISABLE TRIGGER USER")
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s", [table])
        for (name,) in cursor.fetchall():
            cursor.execute(f"DROP TRIGGER {name}")


def entry_of(decision: Decision) -> AuditEntry:
    return AuditEntry.objects.get(decision_id=decision.pk, kind=trail.DECISION)


def test_a_clean_chain_verifies_and_records_every_kind_of_change(chain):
    code, out, err = verify()
    assert code == 0, err
    head = AuditEntry.objects.order_by("-seq").first()
    assert out.strip() == f"verified {head.seq} entries, head {head.hash}"
    kinds = list(AuditEntry.objects.values_list("kind", flat=True))
    assert {"decision", "decision.superseded", "expiry", "policy.created", "policy.changed",
            "agent.created", "agent.changed"} <= set(kinds)
    assert kinds.count("decision") == Decision.objects.count() == 3
    checkpoint = AuditCheckpoint.objects.get()
    assert (checkpoint.seq, checkpoint.hash, checkpoint.complete) == (head.seq, head.hash, True)


def test_the_hash_is_sha256_over_the_previous_hash_then_the_canonical_content(chain):
    import hashlib
    import json

    from interrupts.protocol.signing import canonical

    prev = trail.GENESIS
    for entry in AuditEntry.objects.order_by("seq"):
        assert entry.prev_hash == prev
        assert entry.content.encode() == canonical(json.loads(entry.content))
        assert entry.hash == "sha256:" + hashlib.sha256(prev.encode() + entry.content.encode()).hexdigest()
        prev = entry.hash


def test_a_decision_changed_with_raw_sql_is_named(chain):
    decision = Decision.objects.get(interrupt__interrupt_id="int-b")
    unguard("interrupts_decision")
    raw("UPDATE interrupts_decision SET payload = %s WHERE id = %s", ['{"approved": false}', decision.pk])
    code, _, err = verify()
    assert code == 1
    assert first_problem(err) == (
        f"BROKEN: entry {entry_of(decision).seq}: decision {decision.pk} (int-b by bob) no longer matches "
        "what was recorded (payload changed in the row)"
    )


def test_a_deleted_entry_is_named(chain):
    victim = entry_of(Decision.objects.get(interrupt__interrupt_id="int-b"))
    unguard("interrupts_auditentry")
    raw("DELETE FROM interrupts_auditentry WHERE seq = %s", [victim.seq])
    code, _, err = verify()
    assert code == 1
    assert first_problem(err).startswith(f"BROKEN: entry {victim.seq} is missing")


def test_two_reordered_entries_are_named(chain):
    a, b = AuditEntry.objects.filter(kind=trail.DECISION).order_by("seq")[:2]
    unguard("interrupts_auditentry")
    raw("UPDATE interrupts_auditentry SET seq = 999999 WHERE seq = %s", [a.seq])
    raw("UPDATE interrupts_auditentry SET seq = %s WHERE seq = %s", [a.seq, b.seq])
    raw("UPDATE interrupts_auditentry SET seq = %s WHERE seq = 999999", [b.seq])
    code, _, err = verify()
    assert code == 1
    assert first_problem(err).startswith(f"BROKEN: entry {a.seq} is out of place: its content says it is entry {b.seq}")


def test_an_edited_entry_is_named_and_so_is_one_whose_hash_was_recomputed(chain):
    victim = entry_of(Decision.objects.get(interrupt__interrupt_id="int-b"))
    edited = victim.content.replace('"approved":true', '"approved":false')
    assert edited != victim.content
    unguard("interrupts_auditentry")
    raw("UPDATE interrupts_auditentry SET content = %s WHERE seq = %s", [edited, victim.seq])
    code, _, err = verify()
    assert (code, first_problem(err)) == (
        1, f"BROKEN: entry {victim.seq} is broken: its hash does not match its content (the entry was edited)")
    # Cleverer: the hash recomputed too. The next entry's link gives it away.
    raw("UPDATE interrupts_auditentry SET hash = %s WHERE seq = %s",
        [trail.entry_hash(victim.prev_hash, edited), victim.seq])
    code, _, err = verify()
    assert code == 1
    assert first_problem(err).startswith(f"BROKEN: entry {victim.seq + 1} is broken: its prev_hash is not entry {victim.seq}'s hash")


def test_a_chain_rewritten_whole_after_it_was_verified_is_named(chain):
    assert verify()[0] == 0
    verified = AuditCheckpoint.objects.get().seq
    unguard("interrupts_auditentry")
    prev = trail.GENESIS
    for entry in AuditEntry.objects.order_by("seq"):
        content = entry.content.replace('"approved":true', '"approved":false')
        raw("UPDATE interrupts_auditentry SET content = %s, prev_hash = %s, hash = %s WHERE seq = %s",
            [content, prev, trail.entry_hash(prev, content), entry.seq])
        prev = trail.entry_hash(prev, content)
    code, _, err = verify()
    assert code == 1
    assert first_problem(err).startswith(f"BROKEN: entry {verified} changed since it was verified at")


def test_a_decision_written_around_the_trail_and_an_entry_whose_decision_vanished_are_named(chain):
    bypass = make.decision(pending(make.run(), "int-quiet"), make.user(username="carol"))
    gone = Decision.objects.get(interrupt__interrupt_id="int-b")
    unguard("interrupts_decision")
    raw("DELETE FROM interrupts_decision WHERE id = %s", [gone.pk])
    code, _, err = verify()
    assert code == 1
    lines = err.splitlines()
    assert lines[0].startswith(f"BROKEN: entry {entry_of(gone).seq} records decision {gone.pk}, which no longer exists")
    assert f"BROKEN: decision {bypass.pk} (int-quiet by carol) has no entry in the trail" in lines[1]


def test_renaming_a_user_is_not_tampering(chain):
    Group.objects.get(name="Reviewers").user_set.filter(username="bob").update(username="robert")
    assert verify()[0] == 0


def test_the_database_refuses_to_change_delete_or_fork_the_chain(chain):
    middle = AuditEntry.objects.order_by("seq")[1]
    for statement, params in [
        ("UPDATE interrupts_auditentry SET kind = 'x' WHERE seq = %s", [middle.seq]),
        ("DELETE FROM interrupts_auditentry WHERE seq = %s", [middle.seq]),
        ("INSERT INTO interrupts_auditentry (seq, kind, subject, content, prev_hash, hash, created_at) "
         "VALUES (%s, 'x', 'x', '{}', %s, 'x', %s)", [middle.seq + 1000, middle.hash, timezone.now()]),
    ]:
        with pytest.raises(DatabaseError), transaction.atomic():
            raw(statement, params)
    with pytest.raises(ValueError):
        middle.save()


def test_an_agent_save_that_changes_nothing_tracked_is_not_an_entry_and_secrets_never_are(chain):
    agent = chain.agent
    before = AuditEntry.objects.count()
    agent.description = "only words"
    agent.save()
    assert AuditEntry.objects.count() == before
    agent.auth_header, agent.auth_value = "Authorization", "Bearer very-secret-credential"
    agent.save()
    agent.rotate_signing_secret()
    changes = list(AuditEntry.objects.filter(subject=f"agent:{agent.pk}").order_by("-seq")[:2])
    assert [e.kind for e in changes] == ["agent.changed", "agent.changed"]
    agent.refresh_from_db()
    for entry in changes:
        assert "very-secret-credential" not in entry.content and agent.signing_secret not in entry.content
    newest, older = (trail._last_data(f"agent:{agent.pk}"), __import__("json").loads(changes[1].content)["data"])
    assert newest["credentialSet"] and newest["credentialDigest"] == older["credentialDigest"]
    assert newest["signingSecretDigest"] != older["signingSecretDigest"]


def test_policy_members_are_recorded_by_name_sorted(chain):
    policy = make.policy(name="wires", reason="wire")
    policy.users.add(make.user(username="zed"), make.user(username="amy"))
    data = trail._last_data(f"policy:{policy.pk}")
    assert data["users"] == ["amy", "zed"] and data["groups"] == []
    policy.delete()
    assert AuditEntry.objects.order_by("-seq").first().kind == "policy.deleted"
    assert verify()[0] == 0



def test_the_audit_page_says_how_far_the_trail_is_verified(chain, client):
    client.force_login(make.user(is_staff=True))
    head = AuditEntry.objects.order_by("-seq").first()
    page = client.get("/audit/").content.decode()
    assert f"verified through entry {head.seq}" in page
    assert AuditCheckpoint.objects.get().seq == head.seq


def test_the_exports_carry_the_hashes_and_the_chain_export_is_every_entry(chain, client):
    import json

    client.force_login(make.user(is_staff=True))
    rows = json.loads(b"".join(client.get("/audit/?format=json").streaming_content))
    decided = next(r for r in rows if r["interruptId"] == "int-a")
    assert [e["kind"] for e in decided["trail"]] == ["decision", "decision.superseded", "decision"]
    assert decided["trail"][0]["hash"] == entry_of(Decision.objects.filter(interrupt__interrupt_id="int-a").first()).hash
    lines = b"".join(client.get("/audit/?format=chain").streaming_content).decode().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(AuditEntry.objects.values_list("seq", flat=True))


def test_the_audit_page_says_when_the_trail_does_not_verify(chain, client):
    client.force_login(make.user(is_staff=True))
    client.get("/audit/")
    victim = AuditEntry.objects.order_by("-seq").first()
    unguard("interrupts_auditentry")
    raw("UPDATE interrupts_auditentry SET hash = %s WHERE seq = %s", [trail.GENESIS, victim.seq])
    assert f"entry {victim.seq} changed since it was verified" in client.get("/audit/").content.decode()
