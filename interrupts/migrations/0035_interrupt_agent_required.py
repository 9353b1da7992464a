"""An interrupt's agent is required, and the inbox's agent filter reads one index."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('interrupts', '0034_interrupt_agent'),
    ]

    operations = [
        migrations.AlterField(
            model_name='interrupt',
            name='run_agent',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+',
                                    to='interrupts.agent'),
        ),
        migrations.AddIndex(
            model_name='interrupt',
            index=models.Index(fields=['status', 'run_agent', 'reason', 'created_at', 'id', 'policy', 'run'],
                               name='interrupt_inbox_agent'),
        ),
    ]
