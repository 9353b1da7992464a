"""The audit trail records who may decide: every user and group as it stands, policies by ids.

From here on the signal receivers ``InterruptsConfig.ready`` connects append
an entry whenever a user's flags, groups or permissions or a group's
permissions change; ``audit verify`` holds every row to its last entry. So
that an upgraded database verifies, each existing user and group gets its
first entry now, and each policy an entry naming its agent, groups and users
by id (see ``trail.backfill.backfill_access``). Nothing in the schema changes.
"""

from django.conf import settings
from django.db import migrations


def backfill(apps, schema_editor):
    from interrupts.hub.trail import backfill as trail_backfill

    trail_backfill.backfill_access(apps)


class Migration(migrations.Migration):

    dependencies = [
        ('auth', '0012_alter_user_first_name_max_length'),
        ('contenttypes', '0002_remove_content_type_name'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ('interrupts', '0013_interrupt_governing_policy'),
    ]

    operations = [
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
