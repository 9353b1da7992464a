"""Events keep only their composite indexes: (thread, seq) and (run, seq) serve every lookup.

On SQLite, altering a column rebuilds the table, which drops its triggers:
the append-only trigger of 0002 is put back after the rebuild, either way.
"""

from importlib import import_module

import django.db.models.deletion
from django.db import migrations, models

history = import_module("interrupts.migrations.0002_history_is_immutable")


def restore_append_only(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER IF EXISTS interrupts_event_append_only;")
        schema_editor.execute(history.SQLITE_FORWARD[0])


class Migration(migrations.Migration):

    dependencies = [
        ('interrupts', '0006_agent_auth_header_pattern'),
    ]

    operations = [
        # Backwards the fields are rebuilt after this runs: restore then too.
        migrations.RunPython(migrations.RunPython.noop, restore_append_only),
        migrations.AlterField(
            model_name='event',
            name='run',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='events', to='interrupts.run'),
        ),
        migrations.AlterField(
            model_name='event',
            name='thread',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='events', to='interrupts.thread'),
        ),
        migrations.RunPython(restore_append_only, migrations.RunPython.noop),
    ]
