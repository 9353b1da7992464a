"""The audit trail: complete older decision entries with what the reviewer read (issue 24 item 7).

Decision entries now hold digests of the interrupt's message, response
schema and metadata, its expiry and the subagent that raised it, so an edit
of any of them fails ``audit verify``. Entries written before hold fewer
keys and are verified by the keys they hold; this appends one
``decision.context`` entry per such decision with the rest, as the rows
stand now (see ``trail.backfill.backfill_context``). Nothing in the schema changes.
"""

from django.db import migrations


def backfill(apps, schema_editor):
    from interrupts.hub.trail import backfill as trail_backfill

    trail_backfill.backfill_context(apps)


class Migration(migrations.Migration):

    dependencies = [
        ("interrupts", "0025_api_tokens_hashed"),
    ]

    operations = [
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
