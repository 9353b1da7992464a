import multiprocessing

# Channels' live-server machinery hangs the WebSocket handshake after earlier
# async tests when forked; spawned children start clean.
multiprocessing.set_start_method("spawn", force=True)


import pytest


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # PBKDF2's deliberate slowness is a cost tests need not pay.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
