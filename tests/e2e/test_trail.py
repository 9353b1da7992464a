"""The audit trail: a chain built from real decisions verifies, and each kind of tampering is named.

Tampering is done the way a DBA would: with raw SQL, the guarding trigger
dropped (SQLite) or disabled (PostgreSQL) first. The DDL is inside the
test's transaction, so it is rolled back with everything else.
"""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from interrupts.hub import agents, decisions, policies
from interrupts.hub.trail import backfill
from interrupts.hub.trail import chain as trail_chain
from interrupts.hub.trail import content as trail_content
from interrupts.hub.trail import verify as trail_verify
from interrupts.models import Agent, AuditCheckpoint, AuditEntry, Decision, Interrupt, Policy
from interrupts.protocol.signing import Unsignable, canonical

from .. import factories as make

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


def recorded(decision: Decision) -> Decision:
    # Until decisions.decide appends its own entry, the test does what it will.
    if not AuditEntry.objects.filter(decision_id=decision.pk, kind=trail_chain.DECISION).exists():
        trail_chain.record_decision(decision)
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
    if not AuditEntry.objects.filter(interrupt_id=late.pk, kind=trail_chain.EXPIRY).exists():
        trail_chain.record_expiry(late)
    payments = make.policy(name="payments")
    policies.save(payments, groups=[Group.objects.get(name="Reviewers")], users=[bob, alice])
    agent = run.agent
    agent.url = "http://127.0.0.1:9/moved/"
    agents.save(agent)
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
    return AuditEntry.objects.get(decision_id=decision.pk, kind=trail_chain.DECISION)


def test_a_clean_chain_verifies_and_records_every_kind_of_change(chain):
    code, out, err = verify()
    assert code == 0, err
    head = AuditEntry.objects.order_by("-seq").first()
    assert out.strip() == f"verified {head.seq} entries, head {head.seq}:{head.hash}"
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

    prev = trail_chain.GENESIS
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
        f"BROKEN: entry {entry_of(decision).seq}: decision {decision.pk} (int-b in thread "
        f"{decision.interrupt.run.thread.thread_id}, by bob) no longer matches what was recorded "
        "(payload changed in the row)"
    )


def test_a_deleted_entry_is_named(chain):
    victim = entry_of(Decision.objects.get(interrupt__interrupt_id="int-b"))
    unguard("interrupts_auditentry")
    raw("DELETE FROM interrupts_auditentry WHERE seq = %s", [victim.seq])
    code, _, err = verify()
    assert code == 1
    assert first_problem(err).startswith(f"BROKEN: entry {victim.seq} is missing")


def test_two_reordered_entries_are_named(chain):
    a, b = AuditEntry.objects.filter(kind=trail_chain.DECISION).order_by("seq")[:2]
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
        [trail_chain.entry_hash(victim.prev_hash, edited), victim.seq])
    code, _, err = verify()
    assert code == 1
    assert first_problem(err).startswith(
        f"BROKEN: entry {victim.seq + 1} is broken: its prev_hash is not entry {victim.seq}'s hash"
    )


def test_a_chain_rewritten_whole_after_it_was_verified_is_named(chain):
    assert verify()[0] == 0
    verified = AuditCheckpoint.objects.get().seq
    unguard("interrupts_auditentry")
    rewrite_whole_chain()
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
    assert (f"BROKEN: decision {bypass.pk} (int-quiet in thread {bypass.interrupt.run.thread.thread_id}, by carol) "
            "has no entry in the trail") in lines[1]


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
    agents.save(agent)
    assert AuditEntry.objects.count() == before
    agent.auth_header, agent.auth_value = "Authorization", "Bearer very-secret-credential"
    agents.save(agent)
    agents.rotate_signing_secret(agent)
    changes = list(AuditEntry.objects.filter(subject=f"agent:{agent.pk}").order_by("-seq")[:2])
    assert [e.kind for e in changes] == ["agent.changed", "agent.changed"]
    agent.refresh_from_db()
    for entry in changes:
        assert "very-secret-credential" not in entry.content and agent.signing_secret not in entry.content
    newest, older = (trail_chain.last_data(f"agent:{agent.pk}"), __import__("json").loads(changes[1].content)["data"])
    assert newest["credentialSet"] and newest["credentialDigest"] == older["credentialDigest"]
    assert newest["signingSecretDigest"] != older["signingSecretDigest"]


def test_policy_members_are_recorded_by_name_sorted(chain):
    policy = make.policy(name="wires", reason="wire")
    policies.save(policy, users=[make.user(username="zed"), make.user(username="amy")])
    data = trail_chain.last_data(f"policy:{policy.pk}")
    assert data["users"] == ["amy", "zed"] and data["groups"] == []
    policies.delete(policy)
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
    assert (
        decided["trail"][0]["hash"] == entry_of(Decision.objects.filter(interrupt__interrupt_id="int-a").first()).hash
    )
    document = json.loads(b"".join(client.get("/audit/?format=chain", follow=True).streaming_content))
    assert [e["seq"] for e in document["entries"]] == list(AuditEntry.objects.values_list("seq", flat=True))


def test_the_audit_page_says_when_the_trail_does_not_verify(chain, client):
    client.force_login(make.user(is_staff=True))
    client.get("/audit/")
    victim = AuditEntry.objects.order_by("-seq").first()
    unguard("interrupts_auditentry")
    raw("UPDATE interrupts_auditentry SET hash = %s WHERE seq = %s", [trail_chain.GENESIS, victim.seq])
    assert f"entry {victim.seq} changed since it was verified" in client.get("/audit/").content.decode()


# --- F5: what verify holds every row to -----------------------------------------------------


def problems(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("BROKEN: ")]


def last_entry(subject: str) -> AuditEntry:
    return AuditEntry.objects.filter(subject=subject).order_by("-seq").first()


def test_a_policy_changed_with_raw_sql_is_named(chain):
    policy = Policy.objects.get(name="payments")
    policy.required_approvals = 2
    policies.save(policy)
    assert verify()[0] == 0
    raw("UPDATE interrupts_policy SET required_approvals = %s, allow_self_approval = %s WHERE id = %s",
        [1, True, policy.pk])
    code, _, err = verify()
    seq = last_entry(f"policy:{policy.pk}").seq
    assert (code, problems(err)) == (1, [
        f"BROKEN: entry {seq}: policy {policy.pk} (payments) no longer matches what was recorded "
        "(allowSelfApproval, requiredApprovals changed in the row)"])


def test_a_policy_unrestricted_with_raw_sql_is_named(chain):
    policy = Policy.objects.get(name="payments")
    assert policy.restricted
    raw("DELETE FROM interrupts_policy_users WHERE policy_id = %s", [policy.pk])
    raw("DELETE FROM interrupts_policy_groups WHERE policy_id = %s", [policy.pk])
    raw("UPDATE interrupts_policy SET restricted = %s WHERE id = %s", [False, policy.pk])  # now: every reviewer
    code, _, err = verify()
    assert (code, problems(err)) == (1, [
        f"BROKEN: entry {last_entry(f'policy:{policy.pk}').seq}: policy {policy.pk} (payments) no longer matches "
        "what was recorded (groupIds, restricted, userIds changed in the row)"])
    # An entry from before the field: restricted then meant "names people".
    older = {k: v for k, v in trail_chain.last_data(f"policy:{policy.pk}").items() if k != "restricted"}
    assert trail_verify._policy_differs(older, {**older, "restricted": True}, policy) == []
    assert trail_verify._policy_differs(older, {**older, "restricted": False}, policy) == ["restricted"]


def test_a_policy_member_added_with_raw_sql_is_named_and_a_rename_is_not(chain):
    policy = Policy.objects.get(name="payments")
    Group.objects.filter(name="Reviewers").update(name="Checkers")  # renames grant nothing
    get_user_model().objects.filter(username="bob").update(username="robert")
    assert verify()[0] == 0
    raw("INSERT INTO interrupts_policy_users (policy_id, user_id) VALUES (%s, %s)",
        [policy.pk, make.user(username="mallory", reviewer=False).pk])
    code, _, err = verify()
    assert (code, problems(err)) == (1, [
        f"BROKEN: entry {last_entry(f'policy:{policy.pk}').seq}: policy {policy.pk} (payments) no longer matches "
        "what was recorded (userIds changed in the row)"])


def test_an_agent_changed_with_raw_sql_is_named(chain):
    agent = chain.agent
    raw("UPDATE interrupts_agent SET url = %s, signing_secret = %s WHERE id = %s",
        ["http://127.0.0.1:9/evil/", "whsec_chosen", agent.pk])
    code, _, err = verify()
    assert (code, problems(err)) == (1, [
        f"BROKEN: entry {last_entry(f'agent:{agent.pk}').seq}: agent {agent.pk} ({agent.name}) no longer matches "
        "what was recorded (url, signingSecretDigest changed in the row)"])


def test_an_agent_digest_under_a_retired_secret_key_still_matches(chain, settings):
    old = settings.SECRET_KEY
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "a-new-key-" + "x" * 50, [old]
    assert verify()[0] == 0
    settings.SECRET_KEY_FALLBACKS = []
    code, _, err = verify()
    assert code == 1 and "credentialDigest" not in err and "signingSecretDigest changed in the row" in err


def test_rows_deleted_or_written_around_the_trail_are_named(chain):
    quiet, gone = make.policy(name="quiet", reason="nothing-matches"), make.agent(name="gone")
    raw("DELETE FROM interrupts_policy WHERE id = %s", [quiet.pk])
    raw("DELETE FROM interrupts_agent WHERE id = %s", [gone.pk])
    [sneaky] = Policy.objects.bulk_create([Policy(name="sneaky", reason="wire", required_approvals=1)])
    [hidden] = Agent.objects.bulk_create([Agent(name="hidden", url="http://127.0.0.1:9/hidden/")])
    sneaky = Policy.objects.get(name="sneaky")
    hidden = Agent.objects.get(name="hidden")
    code, _, err = verify()
    assert code == 1
    assert problems(err) == [
        f"BROKEN: entry {last_entry(f'policy:{quiet.pk}').seq} records policy {quiet.pk} (quiet), which no longer "
        "exists: it was deleted without an entry (around the trail)",
        f"BROKEN: entry {last_entry(f'agent:{gone.pk}').seq} records agent {gone.pk} (gone), which no longer "
        "exists: it was deleted without an entry (around the trail)",
        f"BROKEN: agent {hidden.pk} (hidden) has no entry in the trail (it was written around the trail)",
        f"BROKEN: policy {sneaky.pk} (sneaky) has no entry in the trail (it was written around the trail)",
    ]


def test_who_may_decide_is_recorded_whichever_side_changes_it(chain):
    decide = Permission.objects.get(codename="decide_interrupt")
    carol = make.user(username="carol", reviewer=False)
    deployers = Group.objects.create(name="Deployers")

    def user_data():
        return trail_chain.last_data(f"user:{carol.pk}")

    assert user_data()["groupIds"] == [] and trail_chain.last_data(f"group:{deployers.pk}")["permissions"] == []
    deployers.user_set.add(carol)
    assert user_data()["groupIds"] == [deployers.pk] and user_data()["groups"] == ["Deployers"]
    decide.group_set.add(deployers)
    assert trail_chain.last_data(f"group:{deployers.pk}")["permissions"] == ["interrupts.decide_interrupt"]
    carol.user_permissions.add(decide)
    assert user_data()["permissions"] == ["interrupts.decide_interrupt"]
    decide.user_set.clear()
    assert user_data()["permissions"] == []
    carol.is_superuser = True
    carol.save()
    assert user_data()["superuser"] is True
    before = AuditEntry.objects.count()
    carol.last_login = timezone.now()
    carol.save(update_fields=["last_login"])
    carol.save()
    assert AuditEntry.objects.count() == before  # nothing the trail holds changed
    decide.group_set.clear()
    assert trail_chain.last_data(f"group:{deployers.pk}")["permissions"] == []
    deployers.user_set.clear()
    assert user_data()["groupIds"] == []
    deployers.user_set.add(carol)
    subject = f"group:{deployers.pk}"
    deployers.delete()
    assert last_entry(subject).kind == "group.deleted"
    assert user_data()["groupIds"] == []
    assert verify()[0] == 0


def test_a_group_added_through_the_admin_is_recorded(chain, client):
    carol = make.user(username="carol", reviewer=False)
    reviewers = Group.objects.get(name="Reviewers")
    client.force_login(make.user(username="root", is_staff=True, is_superuser=True))
    url = f"/admin/auth/user/{carol.pk}/change/"
    form = {"username": "carol", "first_name": "", "last_name": "", "email": "", "is_active": "on",
            "groups": [str(reviewers.pk)], "date_joined_0": "2026-01-01", "date_joined_1": "10:00:00",
            "last_login_0": "", "last_login_1": ""}
    response = client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert trail_chain.last_data(f"user:{carol.pk}")["groupIds"] == [reviewers.pk]
    assert verify()[0] == 0


@pytest.mark.parametrize("statement, changed", [
    ("INSERT INTO auth_user_groups (user_id, group_id) VALUES ({carol}, {reviewers})", "groupIds"),
    ("INSERT INTO auth_user_user_permissions (user_id, permission_id) VALUES ({carol}, {decide})", "permissions"),
    ("UPDATE auth_user SET is_superuser = %s WHERE id = {carol}", "superuser"),
    ("UPDATE auth_user SET is_active = %s WHERE id = {carol}", "active"),
])
def test_a_membership_or_flag_changed_with_raw_sql_is_named(chain, statement, changed):
    carol = make.user(username="carol", reviewer=False, is_active=False)
    names = {"carol": carol.pk, "reviewers": Group.objects.get(name="Reviewers").pk,
             "decide": Permission.objects.get(codename="decide_interrupt").pk}
    raw(statement.format(**names), [True] if "%s" in statement else [])
    code, _, err = verify()
    assert (code, problems(err)) == (1, [
        f"BROKEN: entry {last_entry(f'user:{carol.pk}').seq}: user {carol.pk} (carol) no longer matches what "
        f"was recorded ({changed} changed in the row)"])


def test_a_group_permission_added_with_raw_sql_and_a_user_written_around_the_trail_are_named(chain):
    group = Group.objects.create(name="Bystanders")
    raw("INSERT INTO auth_group_permissions (group_id, permission_id) VALUES (%s, %s)",
        [group.pk, Permission.objects.get(codename="decide_interrupt").pk])
    [ghost] = get_user_model().objects.bulk_create([get_user_model()(username="ghost", is_superuser=True)])
    ghost = get_user_model().objects.get(username="ghost")
    code, _, err = verify()
    assert (code, problems(err)) == (1, [
        f"BROKEN: entry {last_entry(f'group:{group.pk}').seq}: group {group.pk} (Bystanders) no longer matches "
        "what was recorded (permissions changed in the row)",
        f"BROKEN: user {ghost.pk} (ghost) has no entry in the trail (it was written around the trail)"])


@pytest.fixture
def asked(chain):
    """An interrupt about a tool call, in a run alice requested, answered by bob under the policy "mail"."""
    run = make.run(status="interrupted", requested_by=get_user_model().objects.get(username="alice"))
    make.policy(name="mail", agent=run.agent, tool_name="sendEmail")
    interrupt = pending(run, "int-tool", tool_call_id="tc-1", tool_name="sendEmail", message="Send the invoice?",
                        proposed_args={"to": "c@d.com"}, metadata={"risk": "high"},
                        expires_at=timezone.now() + timedelta(hours=1))
    return recorded(decisions.decide(interrupt, get_user_model().objects.get(username="bob"),
                                     "resolved", {"approved": True}))


@pytest.mark.parametrize(
    "statement, params, changed",
    [
        (
            "UPDATE interrupts_interrupt SET proposed_args = %s WHERE id = {interrupt}",
            ['{"to": "m@evil.com"}'],
            "the proposed args (proposedArgsDigest)",
        ),
        (
            "UPDATE interrupts_interrupt SET raw = %s WHERE id = {interrupt}",
            ['{"id": "int-tool", "reason": "x"}'],
            "the interrupt as the agent sent it (rawDigest)",
        ),
        ("UPDATE interrupts_interrupt SET reason = %s WHERE id = {interrupt}", ["harmless"], "reason"),
        (
            "UPDATE interrupts_interrupt SET tool_name = %s WHERE id = {interrupt}",
            ["readEmail"],
            "the tool name (toolName)",
        ),
        (
            "UPDATE interrupts_run SET requested_by_id = NULL WHERE id = {run}",
            [],
            "who requested the run (requestedBy)",
        ),
        # What the card showed the reviewer, besides the agent's raw form.
        (
            "UPDATE interrupts_interrupt SET message = %s WHERE id = {interrupt}",
            ["Send a harmless test email"],
            "the message (messageDigest)",
        ),
        (
            "UPDATE interrupts_interrupt SET response_schema = %s WHERE id = {interrupt}",
            ['{"type": "object"}'],
            "the response schema (responseSchemaDigest)",
        ),
        (
            "UPDATE interrupts_interrupt SET metadata = %s WHERE id = {interrupt}",
            ['{"risk": "low"}'],
            "the interrupt's metadata (metadataDigest)",
        ),
        (
            "UPDATE interrupts_interrupt SET expires_at = %s WHERE id = {interrupt}",
            ["2031-01-01 00:00:00+00:00"],
            "the expiry (expiresAt)",
        ),
        (
            "UPDATE interrupts_decision SET policy = %s WHERE interrupt_id = {interrupt}",
            ["lenient"],
            "the policy (policy)",
        ),
        (
            "UPDATE interrupts_decision SET required_approvals = 3 WHERE interrupt_id = {interrupt}",
            [],
            "the approvals required (requiredApprovals)",
        ),
    ],
)
def test_an_interrupt_or_run_rewritten_under_its_decision_is_named(asked, statement, params, changed):
    interrupt = asked.interrupt
    assert verify()[0] == 0
    unguard("interrupts_interrupt")
    unguard("interrupts_decision")
    raw(statement.format(interrupt=interrupt.pk, run=interrupt.run_id), params)
    code, _, err = verify()
    assert (code, problems(err)) == (
        1,
        [
            f"BROKEN: entry {entry_of(asked).seq}: decision {asked.pk} (int-tool in thread "
            f"{interrupt.run.thread.thread_id}, by bob) no longer matches what was recorded "
            f"({changed} changed in the row)"
        ],
    )


def test_an_entry_written_before_the_interrupt_was_recorded_in_it_is_held_to_what_it_says(asked):
    # An entry from before decision_content held the interrupt: no false alarm, no new protection.
    old = {
        k: v for k, v in json.loads(entry_of(asked).content)["data"].items() if k not in trail_content.DECISION_ADDED
    }
    now = trail_content.decision_content(asked)
    assert trail_verify._comparable(now, old) == trail_verify._comparable(old, old)


def test_an_expired_interrupt_rewritten_to_cancelled_is_named(chain):
    late = Interrupt.objects.get(interrupt_id="int-late")
    raw("UPDATE interrupts_interrupt SET status = 'cancelled' WHERE id = %s", [late.pk])
    code, _, err = verify()
    seq = AuditEntry.objects.get(interrupt_id=late.pk, kind=trail_chain.EXPIRY).seq
    assert (code, problems(err)) == (1, [
        f"BROKEN: entry {seq} records interrupt {late.pk} as expired, but the row says cancelled "
        "(the row was changed)"])


def test_an_upgraded_database_gets_an_entry_for_every_user_group_and_policy(chain):
    from django.apps import apps

    [ghost] = get_user_model().objects.bulk_create([get_user_model()(username="ghost")])
    [quiet] = Group.objects.bulk_create([Group(name="Quiet")])
    assert verify()[0] == 1
    made = backfill.backfill_access(apps)
    assert made >= 2 and verify()[0] == 0
    assert backfill.backfill_access(apps) == 0  # once is enough


# --- F7: what RFC 8785 cannot canonicalise ----------------------------------------------------


UNSIGNABLE = [pytest.param({"n": 2**60}, id="integer-beyond-2^53"),
              pytest.param({"s": "\ud800"}, id="lone-surrogate")]


@pytest.mark.parametrize("payload", UNSIGNABLE)
def test_an_unsignable_decision_stored_before_it_was_refused_is_recorded_by_a_stand_in(payload):
    from django.apps import apps

    if "s" in payload and connection.vendor == "postgresql":
        # No such row can exist there: PostgreSQL refuses it, so there is nothing to stand in for.
        from django.db import DataError, transaction

        with pytest.raises(DataError), transaction.atomic():
            make.decision(make.interrupt(), make.user(username="dora"), payload=payload)
        return
    with pytest.raises(Unsignable):
        canonical(payload)
    # Written the way an old release did, before such answers were refused.
    decision = make.decision(make.interrupt(), make.user(username="dora"), payload=payload)
    content = trail_content.decision_content(Decision.objects.get(pk=decision.pk))
    assert content["payload"] == {"unsignable": True, "sha256": content["payload"]["sha256"]}
    canonical(content)  # what the entry holds can be hashed
    backfill.backfill(apps)  # what migration 0011 runs: it no longer aborts
    code, _, err = verify()
    assert code == 0, err
    # The stand-in still changes when the row does.
    unguard("interrupts_decision")
    raw("UPDATE interrupts_decision SET payload = %s WHERE id = %s",
        ['{"n": 1152921504606846977}' if "n" in payload else '{"s": "\\udfff"}', decision.pk])
    code, _, err = verify()
    assert code == 1 and "(payload changed in the row)" in problems(err)[0]


def test_the_stand_ins_are_total_and_tell_values_apart():
    # Text columns cannot hold a lone surrogate on either database, JSON ones can (SQLite):
    # whatever a row holds, its entry can be hashed, and a different value gives a different one.
    for value in ({"n": 2**64}, "\ud800", float("nan"), [1, {"b": "\udfff", "a": 2**60}]):
        canonical(trail_content.signable(value))
        assert trail_content.value_digest(value).startswith("unsignable:sha256:")
    assert trail_content.signable({"n": 2**60}) != trail_content.signable({"n": 2**60 + 1})
    assert trail_content.signable({"a": 2**60, "b": 1}) == trail_content.signable(
        {"b": 1, "a": 2**60}
    )  # as jsonb reorders keys
    assert trail_content._digest("p\ud800ss") != trail_content._digest("p\udfffss")


def rewrite_whole_chain() -> str:
    """Turn every approval in the trail into a rejection and hash the chain anew, as a database writer could;
    the new head's hash."""
    prev = trail_chain.GENESIS
    for entry in AuditEntry.objects.order_by("seq"):
        content = entry.content.replace('"approved":true', '"approved":false')
        raw("UPDATE interrupts_auditentry SET content = %s, prev_hash = %s, hash = %s WHERE seq = %s",
            [content, prev, trail_chain.entry_hash(prev, content), entry.seq])
        prev = trail_chain.entry_hash(prev, content)
    return prev
