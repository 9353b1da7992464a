"""The audit trail: hash-chained entries the database keeps append-only, and the last verification.

Triggers, whoever writes the SQL:

- no UPDATE of an entry, ever;
- an INSERT must be the next entry: seq one past the last, prev_hash the
  last entry's hash (GENESIS for entry 1), so nobody appends a fork or a gap;
- DELETE: refused on PostgreSQL (the test runner's flush truncates, which
  row triggers do not see). On SQLite the flush deletes row by row, oldest
  first, so only the oldest entry may be deleted: a hole in the middle is
  impossible and a cut-off start shows as "entry 1 is missing" in
  ``audit verify``.

Then everything that existed before the trail (agents, policies, decisions,
expiries) is recorded, so an upgraded database verifies.

On SQLite a later table rebuild of interrupts_auditentry drops these
triggers: such a migration must put SQLITE_FORWARD back (see 0007).
"""

import django.db.models.deletion
from django.db import migrations, models

from interrupts.models import AUDIT_GENESIS

TABLE = "interrupts_auditentry"

SQLITE_FORWARD = [
    f"""
    CREATE TRIGGER interrupts_auditentry_append_only
    BEFORE UPDATE ON {TABLE}
    BEGIN SELECT RAISE(ABORT, '{TABLE} is append-only: audit entries are never changed'); END;
    """,
    f"""
    CREATE TRIGGER interrupts_auditentry_next
    BEFORE INSERT ON {TABLE}
    WHEN NEW.seq IS NOT (SELECT COALESCE(MAX(seq), 0) + 1 FROM {TABLE})
      OR NEW.prev_hash IS NOT COALESCE((SELECT hash FROM {TABLE} WHERE seq = NEW.seq - 1), '{AUDIT_GENESIS}')
    BEGIN SELECT RAISE(ABORT, '{TABLE}: an entry must follow the last one (next seq, its hash)'); END;
    """,
    f"""
    CREATE TRIGGER interrupts_auditentry_no_delete
    BEFORE DELETE ON {TABLE}
    WHEN EXISTS (SELECT 1 FROM {TABLE} WHERE seq < OLD.seq)
    BEGIN SELECT RAISE(ABORT, '{TABLE} is append-only: audit entries are never deleted'); END;
    """,
]
SQLITE_REVERSE = [
    "DROP TRIGGER IF EXISTS interrupts_auditentry_append_only;",
    "DROP TRIGGER IF EXISTS interrupts_auditentry_next;",
    "DROP TRIGGER IF EXISTS interrupts_auditentry_no_delete;",
]

POSTGRES_FORWARD = [
    f"""
    CREATE FUNCTION interrupts_auditentry_append_only() RETURNS trigger AS $$
    BEGIN
        RAISE EXCEPTION '{TABLE} is append-only: audit entries are never changed or deleted';
    END;
    $$ LANGUAGE plpgsql;
    """,
    f"""
    CREATE TRIGGER interrupts_auditentry_append_only
    BEFORE UPDATE OR DELETE ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION interrupts_auditentry_append_only();
    """,
    f"""
    CREATE FUNCTION interrupts_auditentry_next() RETURNS trigger AS $$
    BEGIN
        IF NEW.seq IS DISTINCT FROM (SELECT COALESCE(MAX(seq), 0) + 1 FROM {TABLE})
           OR NEW.prev_hash IS DISTINCT FROM
              COALESCE((SELECT hash FROM {TABLE} WHERE seq = NEW.seq - 1), '{AUDIT_GENESIS}') THEN
            RAISE EXCEPTION '{TABLE}: an entry must follow the last one (next seq, its hash)';
        END IF;
        RETURN NEW;
    END;
    $$ LANGUAGE plpgsql;
    """,
    f"""
    CREATE TRIGGER interrupts_auditentry_next
    BEFORE INSERT ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION interrupts_auditentry_next();
    """,
]
POSTGRES_REVERSE = [
    f"DROP TRIGGER IF EXISTS interrupts_auditentry_append_only ON {TABLE};",
    "DROP FUNCTION IF EXISTS interrupts_auditentry_append_only();",
    f"DROP TRIGGER IF EXISTS interrupts_auditentry_next ON {TABLE};",
    "DROP FUNCTION IF EXISTS interrupts_auditentry_next();",
]

STATEMENTS = {
    "sqlite": (SQLITE_FORWARD, SQLITE_REVERSE),
    "postgresql": (POSTGRES_FORWARD, POSTGRES_REVERSE),
}


def _run(schema_editor, index):
    for statement in STATEMENTS[schema_editor.connection.vendor][index]:
        schema_editor.execute(statement)


def triggers(apps, schema_editor):
    _run(schema_editor, 0)


def no_triggers(apps, schema_editor):
    _run(schema_editor, 1)


def backfill(apps, schema_editor):
    # trail's content functions take historical instances: the entries an
    # upgraded database gets are those a new one writes.
    from interrupts.hub.trail import backfill as trail_backfill

    trail_backfill.backfill(apps)


class Migration(migrations.Migration):

    dependencies = [
        ('interrupts', '0010_policies_and_signing'),
    ]

    operations = [
        migrations.CreateModel(
            name='AuditCheckpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('seq', models.PositiveBigIntegerField(default=0)),
                ('hash', models.CharField(default=AUDIT_GENESIS, max_length=71)),
                ('verified_at', models.DateTimeField()),
                ('complete', models.BooleanField(default=False)),
                ('problem', models.TextField(blank=True)),
            ],
        ),
        migrations.CreateModel(
            name='AuditEntry',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('seq', models.PositiveBigIntegerField(unique=True)),
                ('kind', models.CharField(max_length=40)),
                ('subject', models.CharField(max_length=100)),
                ('content', models.TextField()),
                ('prev_hash', models.CharField(max_length=71)),
                ('hash', models.CharField(max_length=71)),
                ('created_at', models.DateTimeField()),
                ('decision', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='audit_entries', to='interrupts.decision')),
                ('interrupt', models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='audit_entries', to='interrupts.interrupt')),
            ],
            options={
                'verbose_name_plural': 'audit entries',
                'ordering': ['seq'],
                'indexes': [models.Index(fields=['subject', 'seq'], name='audit_subject_seq')],
                'constraints': [models.CheckConstraint(condition=models.Q(('seq__gte', 1)), name='audit_seq_positive')],
            },
        ),
        migrations.RunPython(triggers, no_triggers),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
