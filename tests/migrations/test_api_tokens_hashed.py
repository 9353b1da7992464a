"""Migration 0025 on a database from before it: DRF's plaintext tokens become digests that still work.

The database is taken back to just before 0025, given DRF's own token table
by DRF's own migrations (as every existing install has it), filled, and
migrated forward again, on whichever back end DATABASE_URL names.
"""

import binascii
import importlib
import os
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.recorder import MigrationRecorder
from django.test import Client

from interrupts.hub import tokens
from interrupts.models import APIToken

pytestmark = pytest.mark.django_db(transaction=True)

MIGRATION = ("interrupts", "0025_api_tokens_hashed")
DRF_TOKEN_MIGRATIONS = ["0001_initial", "0002_auto_20160226_1747", "0003_tokenproxy",
                        "0004_alter_tokenproxy_options"]
LONG_AGO = datetime(2025, 3, 1, 12, 30, tzinfo=UTC)


def _before_0025() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.get_migration(*MIGRATION).dependencies


def _install_drf_tokens(state):
    """DRF's authtoken table made by DRF's migrations, recorded as applied: an install from before 0025."""
    with connection.schema_editor() as editor:
        for name in DRF_TOKEN_MIGRATIONS:
            module = importlib.import_module(f"rest_framework.authtoken.migrations.{name}")
            state = module.Migration(name, "authtoken").apply(state, editor)
    recorder = MigrationRecorder(connection)
    for name in DRF_TOKEN_MIGRATIONS:
        recorder.record_applied("authtoken", name)
    return state.apps


@pytest.fixture
def back_before_0025():
    executor = MigrationExecutor(connection)
    targets = [dependency for dependency in _before_0025() if dependency[0] == "interrupts"]
    executor.migrate(targets)
    executor.loader.build_graph()
    yield executor.loader.project_state(_before_0025(), at_end=True)
    # Whatever happened, leave the schema whole for the tests after this one.
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_plaintext_tokens_still_authenticate_after_0025_and_the_plaintext_is_gone(back_before_0025):
    old = _install_drf_tokens(back_before_0025)
    User, Token = old.get_model("auth", "User"), old.get_model("authtoken", "Token")
    keys = {}
    for username in ("machine", "scraper"):
        user = User.objects.create(username=username, is_active=True)
        keys[username] = binascii.hexlify(os.urandom(20)).decode()  # as DRF's Token.generate_key makes them
        Token.objects.create(user_id=user.pk, key=keys[username])
    Token.objects.filter(key=keys["machine"]).update(created=LONG_AGO)

    executor = MigrationExecutor(connection)
    executor.migrate([MIGRATION])

    assert "authtoken_token" not in connection.introspection.table_names()
    assert not MigrationRecorder(connection).migration_qs.filter(app="authtoken").exists()
    # The app as it is now needs the schema as it is now: the later migrations run before it reads anything.
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    machine = APIToken.objects.select_related("user").get(user__username="machine")
    assert machine.created == LONG_AGO and machine.expiry is None
    client = Client()
    for username, key in keys.items():
        assert tokens.user_for(key).get_username() == username
        assert client.get("/api/interrupts/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200
    # What is left in the database is digests: no stored value is any token.
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {connection.ops.quote_name(APIToken._meta.db_table)}")
        stored = [str(value) for row in cursor.fetchall() for value in row if value is not None]
    assert not any(key in value for key in keys.values() for value in stored)
    assert all(tokens.user_for(value) is None for value in stored)


def test_0025_on_a_database_that_never_had_plaintext_tokens(back_before_0025):
    # A fresh install (DRF's tokens never installed): nothing to move, nothing to drop.
    executor = MigrationExecutor(connection)
    executor.migrate([MIGRATION])
    assert not APIToken.objects.exists()
    assert "authtoken_token" not in connection.introspection.table_names()
