"""Approval policies, the decide permission, reviewer attestation and agent signing secrets.

- ``interrupts.decide_interrupt`` gates every decision; a ``Reviewers`` group holds it.
- A decision records its action and the policy that admitted its author;
  an interrupt may now gather one live decision per reviewer (a quorum).
- Every run records who requested it, so nobody approves their own request.
- Every agent gets its own signing secret (a column default would give all
  existing agents the same one).

On SQLite, changing the decision table rebuilds it, which drops its
triggers: the immutability trigger is put back, now covering the new columns.
"""

import django.core.validators
import django.db.models.deletion
import interrupts.models
from django.conf import settings
from importlib import import_module

from django.db import migrations, models

history = import_module("interrupts.migrations.0002_history_is_immutable")

# Every column of a decision but superseded_at: none of them may change.
DECISION_COLUMNS = [
    "id", "interrupt_id", "user_id", "status", "payload", "edited_args",
    "metadata", "comment", "created_at", "action", "policy", "required_approvals",
]

SQLITE_FORWARD = [
    "DROP TRIGGER IF EXISTS interrupts_decision_immutable;",
    history.sqlite_decision_trigger(DECISION_COLUMNS),
]
POSTGRES_FORWARD = [history.postgres_decision_function(DECISION_COLUMNS, replace=True)]


def decision_trigger(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for statement in {"sqlite": SQLITE_FORWARD, "postgresql": POSTGRES_FORWARD}[vendor]:
        schema_editor.execute(statement)


def reviewers_group(apps, schema_editor):
    # Permissions are normally created after every migration has run; the
    # group needs its permission now.
    from django.contrib.auth.management import create_permissions

    config = apps.get_app_config("interrupts")
    config.models_module = True
    create_permissions(config, apps=apps, verbosity=0)
    config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    decide = Permission.objects.get(content_type__app_label="interrupts", codename="decide_interrupt")
    group, _ = Group.objects.get_or_create(name="Reviewers")
    group.permissions.add(decide)


def fill_in(apps, schema_editor):
    Agent = apps.get_model("interrupts", "Agent")
    Run = apps.get_model("interrupts", "Run")
    Policy = apps.get_model("interrupts", "Policy")
    for agent in Agent.objects.all():
        agent.signing_secret = interrupts.models.new_signing_secret()
        agent.save(update_fields=["signing_secret"])
        if agent.builtin:
            # As register_demo_agents gives a new demo agent: the README's tour is one person.
            Policy.objects.get_or_create(agent=agent, reason="", tool_name="", defaults={
                "name": f"demo: {agent.name} (self-approval allowed)", "allow_self_approval": True})
    # A resume carries its parent's requester; parents come first by pk.
    requested = {}
    for run in Run.objects.order_by("pk").only("pk", "parent_id", "created_by_id", "resume_key"):
        who = requested.get(run.parent_id) if run.resume_key and run.parent_id else run.created_by_id
        requested[run.pk] = who
        if who is not None:
            Run.objects.filter(pk=run.pk).update(requested_by_id=who)


class Migration(migrations.Migration):

    dependencies = [
        ('auth', '0012_alter_user_first_name_max_length'),
        ('interrupts', '0009_api_token_shown_masked'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Policy',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=100, unique=True)),
                ('reason', models.CharField(blank=True, help_text='Only interrupts with this reason; empty for any.', max_length=200)),
                ('tool_name', models.CharField(blank=True, help_text='Only interrupts about this tool; empty for any.', max_length=200)),
                ('required_approvals', models.PositiveSmallIntegerField(default=1, help_text='How many distinct eligible people must approve; one rejection or cancel ends it.', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(10)])),
                ('allow_self_approval', models.BooleanField(default=False, help_text='Whether the person who started the run may decide its interrupts.')),
                ('target_minutes', models.PositiveIntegerField(blank=True, help_text='How soon a decision is expected, in minutes.', null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'verbose_name_plural': 'policies',
                'ordering': ['name'],
            },
        ),
        migrations.AlterModelOptions(
            name='interrupt',
            options={'ordering': ['created_at', 'pk'], 'permissions': [('decide_interrupt', 'Can approve, reject, answer or cancel interrupts')]},
        ),
        migrations.RemoveConstraint(
            model_name='decision',
            name='one_live_decision_per_interrupt',
        ),
        migrations.AddField(
            model_name='agent',
            name='signing_secret',
            field=models.CharField(default=interrupts.models.new_signing_secret, editable=False, max_length=100),
        ),
        migrations.AddField(
            model_name='decision',
            name='action',
            field=models.CharField(blank=True, max_length=16),
        ),
        migrations.AddField(
            model_name='decision',
            name='policy',
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.AddField(
            model_name='decision',
            name='required_approvals',
            field=models.PositiveSmallIntegerField(default=1),
        ),
        migrations.AddField(
            model_name='run',
            name='requested_by',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddConstraint(
            model_name='decision',
            constraint=models.UniqueConstraint(condition=models.Q(('superseded_at__isnull', True)), fields=('interrupt', 'user'), name='one_live_decision_per_reviewer'),
        ),
        migrations.AddField(
            model_name='policy',
            name='agent',
            field=models.ForeignKey(blank=True, help_text='The agent whose interrupts this governs; empty for every agent.', null=True, on_delete=django.db.models.deletion.CASCADE, related_name='policies', to='interrupts.agent'),
        ),
        migrations.AddField(
            model_name='policy',
            name='groups',
            field=models.ManyToManyField(blank=True, help_text='Groups whose members may decide; with no groups and no users, everyone allowed to decide interrupts.', related_name='+', to='auth.group'),
        ),
        migrations.AddField(
            model_name='policy',
            name='users',
            field=models.ManyToManyField(blank=True, help_text="People who may decide, besides the groups' members.", related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddConstraint(
            model_name='policy',
            constraint=models.UniqueConstraint(condition=models.Q(('agent__isnull', False)), fields=('agent', 'reason', 'tool_name'), name='policy_scope_unique_per_agent'),
        ),
        migrations.AddConstraint(
            model_name='policy',
            constraint=models.UniqueConstraint(condition=models.Q(('agent__isnull', True)), fields=('reason', 'tool_name'), name='policy_scope_unique_for_every_agent'),
        ),
        migrations.AddConstraint(
            model_name='policy',
            constraint=models.CheckConstraint(condition=models.Q(('required_approvals__gte', 1), ('required_approvals__lte', 10)), name='policy_required_approvals_in_range'),
        ),
        migrations.RunPython(decision_trigger, migrations.RunPython.noop),
        migrations.RunPython(reviewers_group, migrations.RunPython.noop),
        migrations.RunPython(fill_in, migrations.RunPython.noop),
    ]
