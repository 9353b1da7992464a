"""API tokens at rest are digests (hub.tokens, knox): what a database reader sees, what each door accepts."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from interrupts.hub import tokens
from interrupts.models import APIToken

from .. import factories as make

pytestmark = pytest.mark.django_db


def api(client, key: str, **extra):
    return client.get("/api/interrupts/", HTTP_AUTHORIZATION=f"Token {key}", **extra)


def gateway(client, header: str):
    # A known token reaches the agent lookup (404 for a name nobody registered); any other is 401.
    return client.post("/agui/nobody/", data="{}", content_type="application/json", HTTP_AUTHORIZATION=header)


def stored_values() -> list[str]:
    """Every value of every token row, as someone reading the table sees it."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {connection.ops.quote_name(APIToken._meta.db_table)}")
        return [str(value) for row in cursor.fetchall() for value in row if value is not None]


def test_a_database_reader_finds_no_token_that_authenticates(client):
    user = make.user()
    key = make.token(user)
    assert api(client, key).status_code == 200
    values = stored_values()
    assert values and not any(key in value for value in values)
    for value in values:
        assert tokens.user_for(value) is None
        assert api(client, value).status_code == 401
    # What is kept: the SHA-512 digest (hex) and the first characters that find the row.
    row = APIToken.objects.get()
    assert len(row.digest) == 128 and row.token_key == key[:tokens.KEY_CHARS]


def test_the_api_and_the_gateway_both_take_a_new_token(client):
    key = make.token(make.user())
    assert api(client, key).status_code == 200
    assert gateway(client, f"Token {key}").status_code == 404
    assert gateway(client, f"Bearer {key}").status_code == 404
    assert gateway(client, f"Token {key[:-1]}x").status_code == 401


def test_a_token_check_is_one_indexed_lookup():
    user = make.user()
    key = make.token(user)
    with CaptureQueriesContext(connection) as statements:
        assert tokens.user_for(key) == user
    assert len(statements) == 1, [q["sql"] for q in statements]
    assert "token_key" in statements[0]["sql"]


def test_a_revoked_token_is_refused_at_both_doors(client):
    user = make.user()
    key, other = make.token(user), make.token(user)
    assert tokens.revoke(key[:tokens.KEY_CHARS]) == 1
    assert tokens.user_for(key) is None
    assert api(client, key).status_code == 401
    assert gateway(client, f"Token {key}").status_code == 401
    assert api(client, other).status_code == 200  # the user's other token is not touched
    assert tokens.revoke_all(user) == 1 and api(client, other).status_code == 401


def test_revoking_by_a_whole_token_needs_the_whole_token():
    key = make.token(make.user())
    with pytest.raises(ValueError):
        tokens.revoke(key[:4])  # too short to name one token
    assert tokens.revoke(key[:tokens.KEY_CHARS] + "0" * 10) == 0  # right prefix, wrong token
    assert tokens.revoke(key) == 1


def test_an_expired_token_is_refused_and_dropped(client):
    key = make.token(make.user(), days=1)
    row = APIToken.objects.get()
    assert timedelta(hours=23) < row.expiry - timezone.now() <= timedelta(days=1)
    assert api(client, key).status_code == 200
    APIToken.objects.filter(pk=row.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    assert api(client, key).status_code == 401
    assert not APIToken.objects.exists()


def test_tokens_last_until_revoked_unless_a_default_lifetime_is_set(settings):
    user = make.user()
    make.token(user)
    assert APIToken.objects.get().expiry is None
    settings.COUNTERSIGN_TOKEN_DAYS = 30.0
    _, key = tokens.issue(user)
    expiry = APIToken.objects.get(token_key=key[:tokens.KEY_CHARS]).expiry
    assert timedelta(days=29) < expiry - timezone.now() <= timedelta(days=30)


def test_an_inactive_user_s_token_is_refused(client):
    user = make.user()
    key = make.token(user)
    user.is_active = False
    user.save(update_fields=["is_active"])
    assert api(client, key).status_code == 401
    assert gateway(client, f"Token {key}").status_code == 401


def test_a_token_that_is_not_utf8_is_a_wrong_token_not_a_crash(client):
    # WSGI headers are latin-1: these bytes are not UTF-8, which knox alone lets escape as a 500.
    assert api(client, "caf\xe9").status_code == 401
    assert gateway(client, "Token caf\xe9").status_code == 401


def test_the_command_prints_a_token_once_lists_it_masked_and_revokes_it(client, capsys):
    user = make.user(username="machine")
    call_command("tokens", "create", "machine", "--days", "7")
    out, err = capsys.readouterr()
    key = out.strip()
    assert len(key) == 64 and "\n" not in key and "Shown once" in err
    assert api(client, key).status_code == 200
    assert APIToken.objects.get(user=user).expiry is not None

    call_command("tokens", "list")
    listing = capsys.readouterr().out
    assert key[:tokens.KEY_CHARS] in listing and "machine" in listing and key not in listing

    call_command("tokens", "revoke", key[:tokens.KEY_CHARS])
    assert "Revoked 1" in capsys.readouterr().out
    assert api(client, key).status_code == 401
