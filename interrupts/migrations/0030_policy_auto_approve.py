"""A policy's "auto-approve when" tier; a decision may be taken by it.

The decision table's immutability trigger is redefined to cover ``by_policy``;
on SQLite, adding the policy's columns rebuilds its table and drops the policy
version triggers: both are put back, as 0028 did.
"""

from importlib import import_module

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

grants = import_module("interrupts.migrations.0028_grants")

# Every column of a decision but superseded_at: none of them may change.
DECISION_COLUMNS = [*grants.DECISION_COLUMNS, "by_policy"]


class Migration(migrations.Migration):

    dependencies = [
        ('interrupts', '0029_expiry_warning'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='decision',
            name='by_policy',
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name='policy',
            name='auto_approve',
            field=models.BooleanField(default=False, help_text='Approve without asking the calls this policy governs whose args match auto_approve_args, in the name of the person who set it.'),
        ),
        migrations.AddField(
            model_name='policy',
            name='auto_approve_args',
            field=models.JSONField(blank=True, default=dict, help_text="A JSON Schema the call's args must match to be approved without asking; {} matches any args."),
        ),
        migrations.AddField(
            model_name='policy',
            name='auto_approve_by',
            field=models.ForeignKey(blank=True, editable=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.RunPython(grants.setting_triggers(DECISION_COLUMNS), grants.setting_triggers(grants.DECISION_COLUMNS)),
    ]
