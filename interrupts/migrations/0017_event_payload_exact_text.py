"""Events keep the agent's exact text: the payload column becomes PostgreSQL's json.

jsonb sorted every event's keys and re-spelled its numbers and spacing, so
the log could not show what an agent actually sent. json keeps the text as
written. SQLite stores JSON as text already: nothing changes there, and the
table is not rebuilt (a rebuild would drop its append-only trigger).
"""

from django.db import migrations

import interrupts.models


def to_json(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE interrupts_event ALTER COLUMN payload TYPE json USING payload::json")


def to_jsonb(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE interrupts_event ALTER COLUMN payload TYPE jsonb USING payload::jsonb")


class Migration(migrations.Migration):

    dependencies = [
        ('interrupts', '0016_interrupt_inbox_index'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='event',
                    name='payload',
                    field=interrupts.models.ExactJSONField(
                        help_text='The event in wire (camelCase) form, as the agent sent it.'),
                ),
            ],
            database_operations=[migrations.RunPython(to_json, to_jsonb)],
        ),
    ]
