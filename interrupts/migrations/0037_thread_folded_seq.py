from django.db import migrations, models
from django.db.models import F


def folded_to_the_end(apps, schema_editor):
    # Until now every batch wrote its fold: each thread's messages and state hold all its events.
    apps.get_model("interrupts", "Thread").objects.using(schema_editor.connection.alias).update(
        folded_seq=F("last_seq"))


class Migration(migrations.Migration):

    dependencies = [
        ("interrupts", "0036_run_run_id"),
    ]

    operations = [
        migrations.AddField(
            model_name="thread",
            name="folded_seq",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.RunPython(folded_to_the_end, migrations.RunPython.noop),
    ]
