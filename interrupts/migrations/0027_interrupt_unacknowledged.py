import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("interrupts", "0026_trail_decision_context"),
    ]

    operations = [
        migrations.AddField(
            model_name="interrupt",
            name="unacknowledged",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                    related_name="+", to="interrupts.decision"),
        ),
    ]
