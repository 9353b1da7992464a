"""Each interrupt keeps its run's agent, filled from the runs here; 0035 makes it required and indexes it.

Two migrations: on PostgreSQL, altering the column in the transaction that
updated its rows fails on the foreign key's pending checks.
"""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def from_runs(apps, schema_editor):
    Interrupt = apps.get_model("interrupts", "Interrupt")
    Run = apps.get_model("interrupts", "Run")
    Interrupt.objects.update(run_agent=Subquery(Run.objects.filter(pk=OuterRef("run_id")).values("agent_id")[:1]))


class Migration(migrations.Migration):

    dependencies = [
        ('interrupts', '0033_passkeys'),
    ]

    operations = [
        migrations.AddField(
            model_name='interrupt',
            name='run_agent',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+',
                                    to='interrupts.agent'),
        ),
        migrations.RunPython(from_runs, migrations.RunPython.noop),
    ]
