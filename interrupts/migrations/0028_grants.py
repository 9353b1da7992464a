"""Standing grants; a decision may name the grant that took it; a policy may always ask a person.

The decision table's immutability trigger is redefined to cover the new column.
On SQLite, adding ``always_ask`` rebuilds the policy table, which drops its
triggers (0018's policy version): they are put back.
"""

from importlib import import_module

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

history = import_module("interrupts.migrations.0002_history_is_immutable")
signing = import_module("interrupts.migrations.0010_policies_and_signing")
version = import_module("interrupts.migrations.0018_policy_version")

# Every column of a decision but superseded_at: none of them may change.
DECISION_COLUMNS = [*signing.DECISION_COLUMNS, "grant_id"]


def setting_triggers(columns):
    """A RunPython step putting back the decision trigger over ``columns``, and on SQLite the policy table's."""
    def triggers(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            schema_editor.execute("DROP TRIGGER IF EXISTS interrupts_decision_immutable;")
            schema_editor.execute(history.sqlite_decision_trigger(columns))
            for action in ("insert", "update", "delete"):
                schema_editor.execute(f"DROP TRIGGER IF EXISTS interrupts_policy_version_{action}")
            for statement in version.SQLITE:
                if "ON interrupts_policy\n" in statement:
                    schema_editor.execute(statement)
        else:
            schema_editor.execute(history.postgres_decision_function(columns, replace=True))
    return triggers


triggers = setting_triggers(DECISION_COLUMNS)


class Migration(migrations.Migration):

    dependencies = [
        ('interrupts', '0027_interrupt_unacknowledged'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='policy',
            name='always_ask',
            field=models.BooleanField(default=False, help_text='Every call asks a person: no standing grant approves these interrupts.'),
        ),
        migrations.CreateModel(
            name='Grant',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('tool_name', models.CharField(max_length=200)),
                ('args_schema', models.JSONField(default=dict)),
                ('why', models.TextField()),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('expires_at', models.DateTimeField()),
                ('max_uses', models.PositiveIntegerField(blank=True, null=True)),
                ('uses', models.PositiveIntegerField(default=0)),
                ('revoked_at', models.DateTimeField(blank=True, null=True)),
                ('agent', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='grants', to='interrupts.agent')),
                ('author', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='grants', to=settings.AUTH_USER_MODEL)),
                ('revoked_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('source', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='interrupts.interrupt')),
            ],
            options={
                'ordering': ['-created_at', '-pk'],
            },
        ),
        migrations.AddField(
            model_name='decision',
            name='grant',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='decisions', to='interrupts.grant'),
        ),
        migrations.AddIndex(
            model_name='grant',
            index=models.Index(condition=models.Q(('revoked_at__isnull', True)), fields=['agent', 'tool_name'], name='grant_scope'),
        ),
        migrations.AddConstraint(
            model_name='grant',
            constraint=models.CheckConstraint(condition=models.Q(('max_uses__isnull', True), ('uses__lte', models.F('max_uses')), _connector='OR'), name='grant_uses_within_max'),
        ),
        migrations.RunPython(triggers, migrations.RunPython.noop),
    ]
