"""A token every write to who may decide changes, in the database itself: what ``policies._held`` checks.

Each process keeps the approval policies it read (three queries a decision
otherwise) and asks, with one indexed read, whether they still hold. The
answer must not depend on the code that wrote the change: ``QuerySet.update``,
``bulk_update``, rows of the policies' m2m tables, ``loaddata`` and raw SQL
send no signal. So triggers on the policy tables (and on groups, whose names
a rule shows) set ``interrupts_policy_version.token`` to a fresh random value
in the writing transaction; a rollback restores the old token with the old
rows, and a token is never reused (a test's flush cannot make old policies
look current).
"""

from django.db import migrations

WATCHED = ("interrupts_policy", "interrupts_policy_groups", "interrupts_policy_users", "auth_group")

SQLITE = ["CREATE TABLE interrupts_policy_version (id integer PRIMARY KEY CHECK (id = 1), token text NOT NULL)"] + [
    f"""CREATE TRIGGER {table}_version_{action.lower()} AFTER {action} ON {table}
        BEGIN
            INSERT INTO interrupts_policy_version (id, token) VALUES (1, lower(hex(randomblob(16))))
            ON CONFLICT (id) DO UPDATE SET token = excluded.token;
        END"""
    for table in WATCHED for action in ("INSERT", "UPDATE", "DELETE")
]
SQLITE_REVERSE = [f"DROP TRIGGER IF EXISTS {table}_version_{action.lower()}"
                  for table in WATCHED for action in ("INSERT", "UPDATE", "DELETE")] + [
    "DROP TABLE IF EXISTS interrupts_policy_version"]

POSTGRES = [
    "CREATE TABLE interrupts_policy_version (id integer PRIMARY KEY CHECK (id = 1), token text NOT NULL)",
    """CREATE FUNCTION interrupts_policy_version_bump() RETURNS trigger AS $$
       BEGIN
           INSERT INTO interrupts_policy_version (id, token) VALUES (1, gen_random_uuid()::text)
           ON CONFLICT (id) DO UPDATE SET token = excluded.token;
           RETURN NULL;
       END $$ LANGUAGE plpgsql""",
] + [
    # Per statement, TRUNCATE included: one bump however many rows a statement writes.
    f"""CREATE TRIGGER {table}_version AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table}
        FOR EACH STATEMENT EXECUTE FUNCTION interrupts_policy_version_bump()"""
    for table in WATCHED
]
POSTGRES_REVERSE = [f"DROP TRIGGER IF EXISTS {table}_version ON {table}" for table in WATCHED] + [
    "DROP FUNCTION IF EXISTS interrupts_policy_version_bump()",
    "DROP TABLE IF EXISTS interrupts_policy_version",
]


def install(apps, schema_editor):
    statements = POSTGRES if schema_editor.connection.vendor == "postgresql" else SQLITE
    for statement in statements:
        schema_editor.execute(statement)


def uninstall(apps, schema_editor):
    statements = POSTGRES_REVERSE if schema_editor.connection.vendor == "postgresql" else SQLITE_REVERSE
    for statement in statements:
        schema_editor.execute(statement)


class Migration(migrations.Migration):

    dependencies = [
        ("interrupts", "0017_event_payload_exact_text"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunPython(install, uninstall)]
