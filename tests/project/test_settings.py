"""Settings come from the environment, with safe development defaults."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Each test reads settings in a process of its own, from the environment it gives: the same on either back end.
pytestmark = pytest.mark.backend_free

ROOT = Path(__file__).resolve().parents[2]

PROBE = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    "print(json.dumps({'engine': s.DATABASES['default']['ENGINE'], "
    "'options': s.DATABASES['default'].get('OPTIONS', {}), "
    "'layer': s.CHANNEL_LAYERS['default']['BACKEND'], 'debug': s.DEBUG, "
    "'hosts': s.ALLOWED_HOSTS}, default=repr))"
)


def run(code: str, **env):
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "DEBUG", "SECRET_KEY", "ALLOWED_HOSTS"}
    }
    return subprocess.run(
        [sys.executable, *code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        env={**base, "DJANGO_SETTINGS_MODULE": "project.settings", **env},
    )


def probe(**env) -> dict:
    result = run(["-c", PROBE], **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_unset_gives_sqlite_in_wal_mode_and_the_in_memory_layer():
    found = probe()
    assert found["engine"] == "django.db.backends.sqlite3"
    assert "journal_mode=WAL" in found["options"]["init_command"]
    assert found["options"]["timeout"] >= 5
    assert found["options"]["transaction_mode"] == "IMMEDIATE"
    assert found["layer"] == "channels.layers.InMemoryChannelLayer"
    assert found["debug"] is True
    assert found["hosts"] == ["127.0.0.1", "localhost", "[::1]"]


def test_database_and_redis_urls_switch_backends():
    found = probe(DATABASE_URL="postgres://cs:pw@127.0.0.1:5432/cs", REDIS_URL="redis://127.0.0.1:6379/0")
    assert found["engine"] == "django.db.backends.postgresql"
    assert found["layer"] == "channels_redis.core.RedisChannelLayer"
    # The pool tries a connection before handing it out: a restart's dead ones are replaced, not used.
    assert found["options"]["pool"]["check"] == "ReplaceAllOnOneDead('default')"


def test_production_refuses_to_start_without_a_secret_key():
    result = run(["-c", PROBE], DEBUG="false")
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_a_malformed_debug_value_is_named():
    result = run(["-c", PROBE], DEBUG="maybe")
    assert result.returncode != 0
    assert "DEBUG='maybe'" in result.stderr


def test_check_deploy_is_clean_under_production_settings():
    result = run(
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        DEBUG="false",
        SECRET_KEY="x7Kq9vP2mR8sT4wY6zA1bC3dE5fG7hJ9kL0nM2pQ4rS6tU8vW0xY2z",
        ALLOWED_HOSTS="countersign.example.com",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
