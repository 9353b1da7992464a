"""Countersign settings.

Everything that differs between a laptop and production comes from the
environment. Unset, you get a safe development set-up: SQLite, the in-memory
channel layer, DEBUG on, loopback hosts only. docs/settings.md lists every variable.
"""

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from interrupts import conf

BASE_DIR = Path(__file__).resolve().parent.parent

# Every COUNTERSIGN_* setting: the environment's value where set, else the
# default interrupts/conf.py declares (with what each means). The app reads
# them through interrupts.conf.settings; a few feed Django's own settings below.
_countersign = conf.from_environment(os.environ)
globals().update(_countersign)


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return conf.parse_bool(name, value)


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if not value:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


DEBUG = env_bool("DEBUG", True)

_DEV_SECRET_KEY = "django-insecure-countersign-development-only-key"
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        # A production process must never run on the well-known development key.
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is false.")
    SECRET_KEY = _DEV_SECRET_KEY

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    # First, so that runserver serves ASGI (HTTP and WebSocket) too.
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "rest_framework",
    # API tokens, kept as digests (before interrupts, whose admin replaces knox's).
    "knox",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "interrupts",
    # Failed logins throttled per user and address (AXES_* below).
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Sets the Content-Security-Policy header and each request's nonce, on
    # Django's debug pages too (interrupts/web/csp.py).
    "interrupts.web.csp.ContentSecurityPolicy",
    "interrupts.web.middleware.RefuseNulCharacters",
    # A database that cannot serve now (busy, full, restarting) gets 503 with Retry-After, not a 500.
    "interrupts.web.middleware.DatabaseFaults",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as its docs ask: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.csp",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "interrupts.web.context_processors.header",
                "interrupts.web.context_processors.limits",
            ],
            # The tags live with the web layer (interrupts/web/), not at the app's top.
            "libraries": {"countersign": "interrupts.web.templatetags.countersign"},
        },
    },
]

ASGI_APPLICATION = "project.asgi.application"
WSGI_APPLICATION = None

# --- Database -------------------------------------------------------------

DATABASE_URL = os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
# COUNTERSIGN_DB_LOCK_TIMEOUT: seconds a statement waits for a lock before 503 BUSY.
DB_LOCK_TIMEOUT = _countersign["COUNTERSIGN_DB_LOCK_TIMEOUT"]
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A pool per process. Channels closes "old" connections before every
    # consumer message, and without a pool that meant a new PostgreSQL
    # session for nearly every event relayed and every socket told of a
    # change (measured: 0.8 per event, ~1 per socket per broadcast).
    # Persistent connections (CONN_MAX_AGE) are no answer under ASGI: each
    # request's thread keeps its own, and 50 concurrent requests used up the
    # server's connection slots.
    from .dbpool import ReplaceAllOnOneDead

    DATABASES["default"]["OPTIONS"] = {
        # check: a connection is tried before it is handed out, so the dead ones a
        # restart (or pg_terminate_backend) left in the pool are replaced, not used,
        # all of them at the first one found.
        "pool": {"min_size": 1, "max_size": _countersign["COUNTERSIGN_DB_POOL_SIZE"],
                 "timeout": _countersign["COUNTERSIGN_DB_POOL_TIMEOUT"], "check": ReplaceAllOnOneDead("default")},
        # PostgreSQL waits for a lock without end by default.
        "options": f"-c lock_timeout={int(DB_LOCK_TIMEOUT * 1000)}",
    }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE transactions plus WAL and a busy timeout make concurrent
    # writers wait for each other instead of failing with "database is locked"
    # (measured: 7 of 8 racing processes failed with the default DEFERRED).
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": DB_LOCK_TIMEOUT,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Each connection kept by its thread: requests run on kept threads (web/handler.py), and
    # opening one (its PRAGMAs, Django's functions) cost about 0.7 ms of every request.
    DATABASES["default"]["CONN_MAX_AGE"] = None
    if os.environ.get("SQLITE_NO_GROWTH"):
        # Tests only: the file may not grow past its size when a connection opens (SQLite
        # raises max_page_count to that size), so a full disk is met without filling one.
        DATABASES["default"]["OPTIONS"]["init_command"] += " PRAGMA max_page_count=1;"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channels ---------------------------------------------------------------

REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py's default pool of 100 connections runs out at about
                # 100 concurrent WebSocket connects per process.
                # redis-py 8 times reads out after 5 s, the length of the
                # layer's own blocking read: idle sockets' consumers died with
                # "Timeout reading from ..." about every 5 s. No read timeout.
                "hosts": [{"address": REDIS_URL, "max_connections": 1000, "socket_timeout": None}],
                # Several deployments (or test servers) may share one Redis.
                "prefix": _countersign["COUNTERSIGN_CHANNEL_PREFIX"],
                # The layer drops messages for a full channel; the event log is
                # the record, but a larger buffer keeps gaps rare.
                "capacity": 1000,
            },
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": 1000},
        }
    }

# --- Auth -------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Failed logins (the login page and the admin's) are counted per username and
# address together, so one attacker cannot lock a colleague out from
# elsewhere; past the limit that pair waits out the cool-off (429, the
# lockout page). Axes' backend only counts and refuses; ModelBackend logs in.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = _countersign["COUNTERSIGN_LOGIN_FAILURE_LIMIT"]
AXES_COOLOFF_TIME = timedelta(seconds=_countersign["COUNTERSIGN_LOGIN_COOLOFF"])
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "interrupts.web.middleware.login_lockout"
# The address is REMOTE_ADDR, which `serve --proxy-headers` fills from the
# proxy's X-Forwarded-For; never a header the client writes itself, or each
# guess could claim a fresh address (this matters if django-ipware is installed).
AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        # TokenAuthentication that counts failed tokens per address (429 THROTTLED).
        "interrupts.api.authentication.ThrottledTokenAuthentication",
    ],
    # Generous: a person or script far past these is a runaway, not a reviewer.
    # Counted per process (the default local-memory cache).
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.AnonRateThrottle",
        "rest_framework.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": _countersign["COUNTERSIGN_API_RATE_ANON"],
        "user": _countersign["COUNTERSIGN_API_RATE_USER"],
        "failed_token": _countersign["COUNTERSIGN_API_RATE_FAILED_TOKENS"],
    },
    # Throttles count REMOTE_ADDR (which `serve --proxy-headers` sets from the
    # proxy), never the client's own X-Forwarded-For.
    "NUM_PROXIES": 0,
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "interrupts.api.errors.exception_handler",
    # JSON only, and only JSON that every database can store and every agent
    # can read back (no NUL characters, bounded nesting).
    "DEFAULT_PARSER_CLASSES": ["interrupts.api.parsers.JSONParser"],
    # DRF's limit/offset paging with a ceiling on ?limit=.
    "DEFAULT_PAGINATION_CLASS": "interrupts.api.pagination.LimitOffsetPagination",
    "PAGE_SIZE": conf.API_PAGE_SIZE,
}
# API tokens (interrupts/hub/tokens.py): knox keeps each one's SHA-512 digest and
# the first characters to find it by, never the token itself. Same header as ever.
REST_KNOX = {
    "AUTH_HEADER_PREFIX": "Token",
    "TOKEN_TTL": (timedelta(days=_countersign["COUNTERSIGN_TOKEN_DAYS"])
                  if _countersign["COUNTERSIGN_TOKEN_DAYS"] else None),
    "AUTO_REFRESH": False,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Countersign API",
    "DESCRIPTION": "Human-in-the-loop review for AG-UI agents: threads, runs, events, interrupts, decisions.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # Swagger UI from the sidecar package: the docs work offline, no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # Three models have a "status" with different choices: name each enum.
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "interrupts.models.RunStatus",
        "InterruptStatusEnum": "interrupts.models.InterruptStatus",
        "DecisionStatusEnum": "interrupts.models.DecisionStatus",
        "DeliveryStatusEnum": "interrupts.models.DeliveryStatus",
        "NotifyEventEnum": "interrupts.models.NotifyEvent",
    },
}

# --- Internationalisation ---------------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Static files -----------------------------------------------------------

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

# --- Security (production: DEBUG=false) -------------------------------------

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # the live pages' JS reads the token for fetch()
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    # No SECURE_PROXY_SSL_HEADER: Django would then believe any client's own
    # "X-Forwarded-Proto: https" and skip the redirect. `serve --proxy-headers`
    # has daphne put the proxy's scheme into the ASGI scope instead, so only
    # a process started behind a proxy trusts the header (tests/project/test_url_access.py).
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)

# --- Content-Security-Policy
# Agent text is shown on every page; should any ever become markup, the browser
# still runs no script but ours: scripts from this origin or carrying the
# request's nonce (no inline handlers, no javascript: URLs, no eval), no
# plugins, no <base> to re-point our relative URLs, no framing, forms post
# only here. connect-src 'self' covers fetch() and, in CSP Level 3, ws:/wss:
# to this same host and port (the live pages' WebSockets); a bare ws: would
# allow any host. Styles: our stylesheets only, no <style> and no style
# attributes (json-editor's theme rules are off and its hidden labels use a
# class, see countersign.js; the API docs' template drops its inline <style>);
# scripts may still set element.style, which CSP does not govern.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "font-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
}

# --- Countersign's own ------------------------------------------------------
# The COUNTERSIGN_* settings above (timeouts, stream and run limits, retries,
# agent networks, demo agents) are declared with their defaults and meaning in
# interrupts/conf.py. This one is Django's: a request's body, past which 413 TOO_LARGE.
DATA_UPLOAD_MAX_MEMORY_SIZE = _countersign["COUNTERSIGN_MAX_REQUEST_BYTES"]

# --- Email (notifications to reviewers: interrupts/hub/notify.py) -------------
# Printed to the console unless an SMTP server is named: EMAIL_HOST picks
# Django's SMTP backend (EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD,
# EMAIL_USE_TLS, EMAIL_USE_SSL), EMAIL_BACKEND any other. Django 6.1's
# MAILERS, not its deprecated EMAIL_* settings. A timeout, so a silent
# server holds one email, never the supervisor's email round for good.
_email_host = os.environ.get("EMAIL_HOST", "")
if _email_host:
    MAILERS = {"default": {"BACKEND": os.environ.get("EMAIL_BACKEND") or "django.core.mail.backends.smtp.EmailBackend",
                           "OPTIONS": {
                               "host": _email_host,
                               "port": int(os.environ.get("EMAIL_PORT") or 25),
                               "username": os.environ.get("EMAIL_HOST_USER", ""),
                               "password": os.environ.get("EMAIL_HOST_PASSWORD", ""),
                               "use_tls": env_bool("EMAIL_USE_TLS", False),
                               "use_ssl": env_bool("EMAIL_USE_SSL", False),
                               "timeout": float(os.environ.get("EMAIL_TIMEOUT") or 10),
                           }}}
else:
    MAILERS = {"default": {"BACKEND": os.environ.get("EMAIL_BACKEND")
                           or "django.core.mail.backends.console.EmailBackend"}}
    if not os.environ.get("EMAIL_BACKEND"):
        # Email to the process's log is the documented default (docs/operations.md,
        # "Email"), not a mistake for `check --deploy` to fail on:
        # webhooks need no mail server, and a team without one still runs.
        SILENCED_SYSTEM_CHECKS = ["mail.E001"]
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "countersign@localhost")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}

# WhiteNoise serves static files from the app directories in development and
# from STATIC_ROOT (after collectstatic) in production, under daphne alike.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG
