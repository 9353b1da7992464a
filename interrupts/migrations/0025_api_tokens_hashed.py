"""API tokens kept as digests: DRF's plaintext tokens move into knox's table, and theirs is dropped.

Each existing token keeps working: knox finds a row by the token's first
TOKEN_KEY_LENGTH characters and compares the SHA-512 digest of the whole
token, and both are computed here, with knox's own functions, from the
40-character keys DRF made. The plaintext table is then dropped, with its
rows in django_migrations, so rest_framework.authtoken can leave
INSTALLED_APPS (a fresh database never had the table: nothing to move).
Not reversible in substance: going back leaves the digests, and the
plaintext is gone for good.
"""

from datetime import UTC

from django.db import migrations
from django.utils import timezone
from django.utils.dateparse import parse_datetime

OLD_TABLE = "authtoken_token"


def _aware(value):
    # A raw cursor hands SQLite's timestamps back as text or naive datetimes.
    if isinstance(value, str):
        value = parse_datetime(value)
    return timezone.make_aware(value, UTC) if timezone.is_naive(value) else value


def hash_plaintext_tokens(apps, schema_editor):
    from knox.crypto import hash_token
    from knox.settings import CONSTANTS

    connection = schema_editor.connection
    if OLD_TABLE not in connection.introspection.table_names():
        return
    quote = schema_editor.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {quote('key')}, {quote('user_id')}, {quote('created')} FROM {quote(OLD_TABLE)}")
        old = cursor.fetchall()
    AuthToken = apps.get_model("knox", "AuthToken")
    for key, user_id, created in old:
        digest = hash_token(key)
        AuthToken.objects.create(digest=digest, token_key=key[:CONSTANTS.TOKEN_KEY_LENGTH], user_id=user_id)
        # created is auto_now_add: the insert stamped it now.
        AuthToken.objects.filter(digest=digest).update(created=_aware(created))
    schema_editor.execute(f"DROP TABLE {quote(OLD_TABLE)}")
    schema_editor.execute("DELETE FROM django_migrations WHERE app = %s", ["authtoken"])


class Migration(migrations.Migration):

    dependencies = [
        ("interrupts", "0024_run_delivery_record"),
        ("knox", "0009_extend_authtoken_field"),
    ]

    operations = [
        migrations.RunPython(hash_plaintext_tokens, migrations.RunPython.noop, elidable=False),
        migrations.CreateModel(
            name="APIToken",
            fields=[],
            options={"verbose_name": "API token", "proxy": True, "indexes": [], "constraints": []},
            bases=("knox.authtoken",),
        ),
    ]
