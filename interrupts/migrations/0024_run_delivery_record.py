from django.db import migrations, models
from django.db.models import F
from django.db.models.functions import Coalesce, Now


def streaming_runs_count_as_sent(apps, schema_editor):
    # Runs streaming when this is applied may have reached their agent: without a
    # mark, recovery would take them for never sent and send them again.
    apps.get_model("interrupts", "Run").objects.filter(status="streaming").update(
        sent_at=Coalesce(F("started_at"), Now()))


class Migration(migrations.Migration):

    dependencies = [
        ("interrupts", "0023_agent_paused_as"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="sent_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="losses",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.RunPython(streaming_runs_count_as_sent, migrations.RunPython.noop),
    ]
