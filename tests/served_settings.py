"""The settings of the apps the tests serve (``tests/servers.py``): the app's own, with a cheap password hash."""

from project.settings import *  # noqa: F403

# Django's advice for tests: PBKDF2's deliberate 0.4 CPU-s was paid by every login on a test server
# and every reviewer a template database made.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
