from django.db import migrations, models


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
    ]
