"""The inbox's index: pending interrupts in their order, with what "waiting for me" filters on.

(status, created_at) grows to (status, created_at, id, policy, run): a deep
page of the inbox and the badge's count read the index alone, not 100,000
table rows. Added before the old one goes, so the inbox is never without one.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('interrupts', '0015_policy_restricted'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='interrupt',
            index=models.Index(fields=['status', 'created_at', 'id', 'policy', 'run'], name='interrupt_inbox'),
        ),
        migrations.RemoveIndex(
            model_name='interrupt',
            name='interrupt_status_created',
        ),
    ]
