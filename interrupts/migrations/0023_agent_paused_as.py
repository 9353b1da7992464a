from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("interrupts", "0022_pending_tool_calls_and_protocol_version"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="paused_as",
            field=models.CharField(blank=True, default="", editable=False, max_length=32),
        ),
    ]
