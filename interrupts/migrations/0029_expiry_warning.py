"""Warning before expiry, and a policy's choice of what expiry does.

On SQLite, adding ``on_expiry`` rebuilds the policy table and drops its triggers:
0028's ``triggers`` puts them back, as it did for ``always_ask``.
"""

from importlib import import_module

from django.db import migrations, models

grants = import_module("interrupts.migrations.0028_grants")


class Migration(migrations.Migration):
    dependencies = [
        ("interrupts", "0028_grants"),
    ]

    operations = [
        migrations.AddField(
            model_name="interrupt",
            name="expiry_warned_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="policy",
            name="on_expiry",
            field=models.CharField(
                choices=[
                    ("cancel", "Cancelled as expired"),
                    ("escalate", "Escalated to the backup group when the warning goes, then cancelled as expired"),
                ],
                blank=True,
                default="cancel",
                help_text="What an interrupt's expiresAt passing unanswered does: the agent is told it was cancelled as expired, never refused; or the request escalates first, when reviewers are warned.",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="delivery",
            name="event",
            field=models.CharField(
                choices=[
                    ("raised", "Raised"),
                    ("decided", "Decided"),
                    ("expiring", "Expiring soon"),
                    ("expired", "Expired"),
                    ("escalated", "Escalated"),
                    ("refused", "Answer refused"),
                ],
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="emailnotice",
            name="event",
            field=models.CharField(
                choices=[
                    ("raised", "Raised"),
                    ("decided", "Decided"),
                    ("expiring", "Expiring soon"),
                    ("expired", "Expired"),
                    ("escalated", "Escalated"),
                    ("refused", "Answer refused"),
                ],
                max_length=16,
            ),
        ),
        migrations.RunPython(grants.triggers, migrations.RunPython.noop),
    ]
