"""The settings of the apps the tests serve (``tests/servers.py``): the app's own, with a cheap password hash."""

from project.settings import *  # noqa: F403

# Django's advice for tests: PBKDF2's deliberate 0.4 CPU-s was paid by every login on a test server
# and every reviewer a template database made.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The static files do not change while a test server runs: each new browser context caches them as it
# would from a deployment, rather than asking again on every page load (DEBUG's WhiteNoise says max-age 0).
WHITENOISE_MAX_AGE = 3600

# A test that reads the emails a served app sends names a folder: each email lands there as a file.
if os.environ.get("EMAIL_FILE_PATH"):  # noqa: F405
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.filebased.EmailBackend",
                           "OPTIONS": {"file_path": os.environ["EMAIL_FILE_PATH"]}}}  # noqa: F405
