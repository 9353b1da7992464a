"""Database triggers that keep history unchangeable, whoever writes the SQL.

Events: no UPDATE, ever. DELETE stays possible because the test runner's flush
deletes rows on SQLite (foreign keys with PROTECT keep the ORM from deleting
events of a live thread).

Decisions: no UPDATE except the one a revision makes: setting superseded_at
on the live decision, once, with every other column unchanged.
"""

from django.db import migrations

DECISION_COLUMNS = [
    "id", "interrupt_id", "user_id", "status", "payload", "edited_args",
    "metadata", "comment", "created_at",
]

def sqlite_decision_trigger(columns: list[str]) -> str:
    """SQLite's trigger: a decision row may only have superseded_at set, once, every other column unchanged."""
    return """
    CREATE TRIGGER interrupts_decision_immutable
    BEFORE UPDATE ON interrupts_decision
    WHEN NOT (OLD.superseded_at IS NULL AND NEW.superseded_at IS NOT NULL AND {same})
    BEGIN SELECT RAISE(ABORT, 'interrupts_decision is immutable: only superseded_at may be set, once'); END;
    """.format(same=" AND ".join(f"NEW.{c} IS OLD.{c}" for c in columns))


def postgres_decision_function(columns: list[str], *, replace: bool) -> str:
    """PostgreSQL's trigger function for the same rule (``replace``: redefine it for more columns)."""
    return """
    CREATE {replace}FUNCTION interrupts_decision_immutable() RETURNS trigger AS $$
    BEGIN
        IF OLD.superseded_at IS NULL AND NEW.superseded_at IS NOT NULL
           AND ({new}) IS NOT DISTINCT FROM ({old}) THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'interrupts_decision is immutable: only superseded_at may be set, once';
    END;
    $$ LANGUAGE plpgsql;
    """.format(
        replace="OR REPLACE " if replace else "",
        new=", ".join(f"NEW.{c}" for c in columns),
        old=", ".join(f"OLD.{c}" for c in columns),
    )


SQLITE_FORWARD = [
    """
    CREATE TRIGGER interrupts_event_append_only
    BEFORE UPDATE ON interrupts_event
    BEGIN SELECT RAISE(ABORT, 'interrupts_event is append-only: events are never changed'); END;
    """,
    sqlite_decision_trigger(DECISION_COLUMNS),
]
SQLITE_REVERSE = [
    "DROP TRIGGER IF EXISTS interrupts_event_append_only;",
    "DROP TRIGGER IF EXISTS interrupts_decision_immutable;",
]

POSTGRES_FORWARD = [
    """
    CREATE FUNCTION interrupts_event_append_only() RETURNS trigger AS $$
    BEGIN
        RAISE EXCEPTION 'interrupts_event is append-only: events are never changed';
    END;
    $$ LANGUAGE plpgsql;
    """,
    """
    CREATE TRIGGER interrupts_event_append_only
    BEFORE UPDATE ON interrupts_event
    FOR EACH ROW EXECUTE FUNCTION interrupts_event_append_only();
    """,
    postgres_decision_function(DECISION_COLUMNS, replace=False),
    """
    CREATE TRIGGER interrupts_decision_immutable
    BEFORE UPDATE ON interrupts_decision
    FOR EACH ROW EXECUTE FUNCTION interrupts_decision_immutable();
    """,
]
POSTGRES_REVERSE = [
    "DROP TRIGGER IF EXISTS interrupts_event_append_only ON interrupts_event;",
    "DROP FUNCTION IF EXISTS interrupts_event_append_only();",
    "DROP TRIGGER IF EXISTS interrupts_decision_immutable ON interrupts_decision;",
    "DROP FUNCTION IF EXISTS interrupts_decision_immutable();",
]

STATEMENTS = {
    "sqlite": (SQLITE_FORWARD, SQLITE_REVERSE),
    "postgresql": (POSTGRES_FORWARD, POSTGRES_REVERSE),
}


def _run(schema_editor, index):
    vendor = schema_editor.connection.vendor
    if vendor not in STATEMENTS:
        raise RuntimeError(
            f"Countersign supports SQLite and PostgreSQL; {vendor} has no history triggers."
        )
    for statement in STATEMENTS[vendor][index]:
        schema_editor.execute(statement)


def forward(apps, schema_editor):
    _run(schema_editor, 0)


def reverse(apps, schema_editor):
    _run(schema_editor, 1)


class Migration(migrations.Migration):
    dependencies = [("interrupts", "0001_initial")]
    operations = [migrations.RunPython(forward, reverse)]
