"""What the reviewer had in view, on each decision; a policy may ask that long args be opened first.

The decision's immutability trigger is redefined to cover ``looked``; on SQLite
adding the columns rebuilds both tables: 0028's step puts the triggers back.
"""

from importlib import import_module

from django.db import migrations, models

grants = import_module("interrupts.migrations.0028_grants")
auto = import_module("interrupts.migrations.0030_policy_auto_approve")

DECISION_COLUMNS = [*auto.DECISION_COLUMNS, "looked"]


class Migration(migrations.Migration):

    dependencies = [
        ('interrupts', '0031_decision_links'),
    ]

    operations = [
        migrations.AddField(
            model_name='decision',
            name='looked',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='policy',
            name='require_look',
            field=models.BooleanField(default=False, help_text='On a card whose args are long, Approve waits until the reviewer has opened the full args.'),
        ),
        migrations.RunPython(grants.setting_triggers(DECISION_COLUMNS), grants.setting_triggers(auto.DECISION_COLUMNS)),
    ]
