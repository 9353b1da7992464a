"""Reviewers' passkeys; a policy may require one to approve; a decision keeps the assertion that countersigned it.

The decision's immutability trigger is redefined to cover ``passkey``; on
SQLite adding the columns rebuilds both tables: 0028's step puts the triggers back.
"""

from importlib import import_module

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

grants = import_module("interrupts.migrations.0028_grants")
looked = import_module("interrupts.migrations.0032_looked")

DECISION_COLUMNS = [*looked.DECISION_COLUMNS, "passkey"]


class Migration(migrations.Migration):

    dependencies = [
        ('interrupts', '0032_looked'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='decision',
            name='passkey',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='policy',
            name='require_passkey',
            field=models.BooleanField(default=False, help_text="Approving takes the reviewer's passkey, signing the exact approval: a session alone (a stolen one too) cannot approve these requests."),
        ),
        migrations.CreateModel(
            name='Passkey',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=100)),
                ('credential_id', models.CharField(max_length=1400, unique=True)),
                ('public_key', models.TextField()),
                ('sign_count', models.PositiveBigIntegerField(default=0)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('last_used_at', models.DateTimeField(blank=True, null=True)),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='passkeys', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['created_at', 'pk'],
            },
        ),
        migrations.RunPython(grants.setting_triggers(DECISION_COLUMNS), grants.setting_triggers(looked.DECISION_COLUMNS)),
    ]
