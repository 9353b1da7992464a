"""Every COUNTERSIGN_* default and every limit, declared once.

Settings. ``conf.settings.COUNTERSIGN_X`` is Django's setting of that name
when the project sets one, else the default declared here (as DRF's
``api_settings`` does), read at each access so ``override_settings`` and
pytest-django's ``settings`` fixture apply. ``project/settings.py`` fills
them from the environment with :func:`from_environment`, which parses each
variable by the type of its default; a few feed Django's or a library's own
settings instead (the request size, the lock timeout, axes, DRF's rates).

Limits. What a person or an agent may send, and how much a page shows, as
plain constants: forms, serializers, services and templates (through the
``limits`` context processor) read them from here. The wire's own bounds
live in the pure protocol layer, which cannot import this module; they are
named here too, so this is the one list of every bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings

from .protocol.schema.limits import (  # noqa: F401  (named here: every limit in one place)
    MAX_PATTERN_CHARS,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_PATTERN_CHARS,
    MAX_VALIDATION_STEPS,
)
from .protocol.contract.history import MAX_HISTORY_MESSAGES  # noqa: F401
from .protocol.dialects.tanstack import MAX_BINDING_CHARS as MAX_TANSTACK_BINDING_CHARS  # noqa: F401
from .protocol.dialects.tanstack import MAX_PAYLOAD_BYTES as MAX_TANSTACK_PAYLOAD_BYTES  # noqa: F401
from .protocol.wire import MAX_DEPTH as MAX_JSON_DEPTH  # noqa: F401
# A thread's conversation as its events build it: at most this many messages (protocol.conversation).
from .protocol.conversation import MAX_MESSAGES as MAX_THREAD_MESSAGES  # noqa: F401
from .sdk.driver import MAX_REQUEST_BYTES as SDK_MAX_REQUEST_BYTES

MIB = 1024 * 1024

# --- Settings: name -> default ---------------------------------------------------

DEFAULTS: dict[str, Any] = {
    # Calling agents, in seconds. Connect: how long to wait for an agent to
    # accept the connection; idle: how long an open stream may stay silent
    # before the run fails.
    "COUNTERSIGN_CONNECT_TIMEOUT": 5.0,
    "COUNTERSIGN_IDLE_TIMEOUT": 120.0,
    # After RUN_FINISHED/RUN_ERROR the agent should close the stream; wait this
    # long for the close (and for any event that must not come) before finishing.
    "COUNTERSIGN_AFTER_TERMINAL_GRACE": 2.0,
    # A streaming run's claim lapses this long after its last heartbeat.
    "COUNTERSIGN_LEASE_SECONDS": 30.0,
    # How often each process looks for queued runs and due expiries without a wake-up.
    "COUNTERSIGN_POLL_INTERVAL": 1.0,
    # Seconds a person's decision that completes a batch holds its resume before
    # the outbox may send it, so the decision can still be undone
    # (``decisions.undo``); 0 sends it at once.
    "COUNTERSIGN_UNDO_SECONDS": 5.0,
    # A decision counts once its answer has been sent to the reviewer; one still
    # unanswered this long after it was recorded was made by a process that died
    # before replying: it is dropped, never sent to the agent (``decisions.drop_unacknowledged``).
    "COUNTERSIGN_ACK_GRACE_SECONDS": 60.0,
    # How often each process escalates requests past their target and lapses
    # idle claims: minutes-long deadlines, so not every poll.
    "COUNTERSIGN_SWEEP_INTERVAL": 5.0,
    # A reviewer's claim on a card ("Alice is reviewing") lapses this long
    # after they last touched it (claimed, renewed, had it open).
    "COUNTERSIGN_CLAIM_IDLE_SECONDS": 900.0,
    # Someone "has a card open" while their page renewed it this recently;
    # pages renew every third of it.
    "COUNTERSIGN_PRESENCE_SECONDS": 45.0,
    # Runs one process streams at once (a fifth of them kept for resumes).
    "COUNTERSIGN_MAX_STREAMS": 50,
    # Every run ends. The idle timeout only catches a silent agent; one that
    # sends anything more often would hold its thread, a stream slot and the
    # queue behind it forever, so a run streaming longer fails with RUN_TOO_LONG.
    "COUNTERSIGN_MAX_RUN_SECONDS": 3600.0,
    # Streaming runs of one agent at once, counted across every process: one
    # slow or hostile agent cannot take every slot from the others. Below
    # MAX_STREAMS, or a single agent could still fill a process; None: 10, or
    # one below a smaller MAX_STREAMS.
    "COUNTERSIGN_MAX_AGENT_STREAMS": None,
    # An agent that cannot be reached (refused, connect timeout, HTTP 502/503/429
    # before any event) is tried again after RETRY_BASE seconds, doubling up to
    # RETRY_MAX_DELAY; after RETRY_ATTEMPTS failed tries the run fails with
    # AGENT_UNREACHABLE. The defaults keep trying for about four hours.
    "COUNTERSIGN_RETRY_BASE": 1.0,
    "COUNTERSIGN_RETRY_MAX_DELAY": 300.0,
    "COUNTERSIGN_RETRY_ATTEMPTS": 50,
    # Addresses agents may be at, checked when Countersign connects (hub/egress.py):
    # comma-separated CIDRs to allow (none: any) and !CIDRs to exclude, e.g.
    # "10.0.0.0/8,!10.9.0.0/16". Link-local, cloud metadata, unspecified and
    # multicast addresses are refused whatever it says.
    "COUNTERSIGN_AGENT_NETWORKS": "",
    # Where this app serves its own demo agents; `manage.py serve` sets it to
    # the address it listens on.
    "COUNTERSIGN_SELF_URL": "http://127.0.0.1:8000",
    # Bounds on what an agent may send: one event (bytes), and one run's whole
    # stream (events, bytes); past any of them the run fails with a RUN_ERROR.
    "COUNTERSIGN_MAX_EVENT_BYTES": 8 * MIB,
    "COUNTERSIGN_MAX_RUN_EVENTS": 100_000,
    "COUNTERSIGN_MAX_RUN_BYTES": 128 * MIB,
    # Bound on a request's body (the REST API, the AG-UI gateway, forms): larger
    # ones get 413 TOO_LARGE. 16 MiB: above the event limit, so a gateway client
    # can send back a conversation holding an event the hub accepted. Django's
    # DATA_UPLOAD_MAX_MEMORY_SIZE.
    # The SDK's own bound (an agent served without Django reads it there): one number.
    "COUNTERSIGN_MAX_REQUEST_BYTES": SDK_MAX_REQUEST_BYTES,
    # Seconds a client may leave a connection silent while sending its request,
    # or between two requests on it, before `manage.py serve` closes it.
    "COUNTERSIGN_HTTP_IDLE_TIMEOUT": 30.0,
    # Seconds a statement waits for a lock another transaction holds before it
    # fails (503 BUSY, Retry-After): no request waits forever behind a stuck one.
    "COUNTERSIGN_DB_LOCK_TIMEOUT": 20.0,
    # PostgreSQL connections each process's pool may open.
    "COUNTERSIGN_DB_POOL_SIZE": 20,
    # Seconds a request waits for a free pooled connection (PostgreSQL) before 503 BUSY;
    # while the server is down, each request waits this long.
    "COUNTERSIGN_DB_POOL_TIMEOUT": 20.0,
    # Several deployments (or test servers) may share one Redis.
    "COUNTERSIGN_CHANNEL_PREFIX": "asgi",
    # Failed logins per username and address before a cool-off (seconds): axes'
    # AXES_FAILURE_LIMIT and AXES_COOLOFF_TIME.
    "COUNTERSIGN_LOGIN_FAILURE_LIMIT": 5,
    "COUNTERSIGN_LOGIN_COOLOFF": 900.0,
    # DRF's throttle rates: anonymous callers, each user, and wrong tokens per address.
    "COUNTERSIGN_API_RATE_ANON": "600/min",
    "COUNTERSIGN_API_RATE_USER": "6000/min",
    "COUNTERSIGN_API_RATE_FAILED_TOKENS": "30/min",
    # Days a new API token lasts (``manage.py tokens create`` may say otherwise
    # per token); 0: until revoked, as machine tokens usually are.
    "COUNTERSIGN_TOKEN_DAYS": 0.0,
    # Whether the demo agents refuse a request that carries no Countersign-Signature.
    # Off, so the README's direct curl works; a forged or stale signature is refused either way.
    "COUNTERSIGN_DEMO_REQUIRE_SIGNATURE": False,
    # How long the demo filing agent's form stays answerable, in seconds.
    "DEMO_FILING_EXPIRES_IN": 3600,
    # Webhooks (hub/notify.py): seconds to connect and to wait for the answer;
    # a failed delivery is tried again after WEBHOOK_RETRY_BASE seconds,
    # doubling up to WEBHOOK_RETRY_MAX_DELAY, WEBHOOK_ATTEMPTS tries in all
    # (the defaults keep trying for about a day), then it is marked failed.
    "COUNTERSIGN_WEBHOOK_TIMEOUT": 10.0,
    "COUNTERSIGN_WEBHOOK_RETRY_BASE": 5.0,
    "COUNTERSIGN_WEBHOOK_RETRY_MAX_DELAY": 3600.0,
    "COUNTERSIGN_WEBHOOK_ATTEMPTS": 30,
    # Emails: tries before an email is marked failed (same backoff), and the
    # digest period in seconds: a digest reader gets at most one email per period.
    "COUNTERSIGN_EMAIL_ATTEMPTS": 10,
    "COUNTERSIGN_EMAIL_DIGEST_SECONDS": 3600,
    # A process sending a webhook or an email holds it this long; past it
    # (the process died) another process sends it again.
    "COUNTERSIGN_NOTIFY_LEASE_SECONDS": 120.0,
    # TEST-ONLY fault injection (hub/crashpoints.py): "<point>" or "events:<n>" makes
    # this process SIGKILL itself at that point of a resume's delivery. Never set it in
    # production; unset (the default) it costs nothing.
    "COUNTERSIGN_CRASH_AT": "",
}


class Settings:
    """``settings.X``: Django's setting X where the project sets it, else ``DEFAULTS[X]``."""

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"{name} is not a Countersign setting (interrupts/conf.py DEFAULTS)")
        value = getattr(django_settings, name, DEFAULTS[name])
        if name == "COUNTERSIGN_MAX_AGENT_STREAMS" and value is None:
            return agent_streams_default(self.COUNTERSIGN_MAX_STREAMS)
        return value


settings = Settings()


def agent_streams_default(max_streams: int) -> int:
    return max(1, min(10, max_streams - 1))


def parse_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"{name}={value!r}: use true or false.")


def from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """Every setting of ``DEFAULTS``: the environment's value where set (and not empty), else the default."""
    from django.core.exceptions import ImproperlyConfigured

    values: dict[str, Any] = {}
    for name, default in DEFAULTS.items():
        raw = environ.get(name, "")
        if raw == "":
            values[name] = default
        elif isinstance(default, bool):
            values[name] = parse_bool(name, raw)
        elif isinstance(default, (int, float)) or default is None:
            kind = int if default is None else type(default)
            try:
                values[name] = kind(raw)
            except ValueError:
                raise ImproperlyConfigured(f"{name}={raw!r}: give a number.") from None
        else:
            values[name] = raw
    streams = values["COUNTERSIGN_MAX_STREAMS"]
    if values["COUNTERSIGN_MAX_AGENT_STREAMS"] is None:
        values["COUNTERSIGN_MAX_AGENT_STREAMS"] = agent_streams_default(streams)
    if not 0 < values["COUNTERSIGN_MAX_AGENT_STREAMS"] < streams:
        raise ImproperlyConfigured(
            f"COUNTERSIGN_MAX_AGENT_STREAMS ({values['COUNTERSIGN_MAX_AGENT_STREAMS']}) must be at least 1 and "
            f"below COUNTERSIGN_MAX_STREAMS ({streams})."
        )
    return values


# --- Limits ----------------------------------------------------------------------

# The answers a reviewer may give an interrupt, on every surface.
ACTIONS = ("approve", "reject", "edit", "respond", "cancel")
# A reviewer's comment on a decision.
MAX_COMMENT_CHARS = 10_000
# The message that starts a run on a thread.
MAX_MESSAGE_CHARS = 100_000
# A thread's title (Thread.title).
MAX_TITLE_CHARS = 200
# An agent's stored credential (Agent.auth_value).
MAX_CREDENTIAL_CHARS = 2000
# A JSON document typed into a review form (an answer, edited arguments).
MAX_JSON_CHARS = 200_000
# Interrupts one outcome may raise, for a team to answer together: each is
# checked (its schema scanned, its patterns compiled) when it is recorded, so
# this bounds that work too.
MAX_INTERRUPTS = 100
# Tool calls a run may leave for its client that are kept on the run (Run.pending_tool_calls),
# and the characters of each id and name kept: the next input must answer those kept (C23).
MAX_PENDING_TOOL_CALLS = 100
MAX_PENDING_TOOL_CALL_CHARS = 200
# Approvals a policy may require of one interrupt: a quorum larger than a
# team plausibly has is a typo that would hold every request forever.
MAX_REQUIRED_APPROVALS = 10
# Bytes of a refused event's raw text kept in the RUN_ERROR that reports it.
MAX_RAW_IN_ERROR = 4096
# Bytes of an agent's error answer kept in the run's RUN_ERROR.
MAX_ERROR_BODY = 8192
# Problems one audit verification reports: past the first few, more only
# repeat the news (the rest are counted).
MAX_AUDIT_PROBLEMS = 20
# Past this, agent-supplied JSON is shown truncated: a page must stay usable.
MAX_SHOWN_CHARS = 20_000
# A request is "at risk" once this much of its policy's target time
# (Policy.target_minutes) has gone by without a decision.
SLA_AT_RISK_FRACTION = 0.75
# Cards one page may say it has open at once (presence): the inbox names the
# one card with the focus. Each named card costs a write and a broadcast to
# every inbox, so a socket may not name more than a few.
MAX_PRESENCE_CARDS = 3
# Interrupts one bulk decision takes at most: each is decided as if alone (its
# policy, its state, its batch's lock), so a request stays seconds, not minutes.
MAX_BULK_DECISIONS = 200
# The actions a bulk decision may take: those that need no answer of their own.
BULK_ACTIONS = ("approve", "reject", "cancel")
# Closed interrupts the insight figures read for one period at most, newest
# first: past it they cover the newest this many, and the page says from when.
INSIGHT_MAX_ROWS = 50_000
# Rows (agents, reasons, reviewers) each chart and table of the insight page
# shows at most, the most first: agents choose their reasons, and the page is
# re-read by everyone watching it on each change. The exports keep every row.
INSIGHT_CHART_ROWS = 25
# Pages: interrupts on an inbox page, trail entries on an audit page, and the
# events a thread's page shows at most.
INBOX_PAGE_SIZE = 25
AUDIT_PAGE_SIZE = 50
THREAD_EVENTS_LIMIT = 5000
# The REST API's pages: the default and the most ?limit= may ask for; a
# thread's events, by default and at most.
API_PAGE_SIZE = 50
API_MAX_LIMIT = 1000
API_EVENTS_PAGE = 200
API_MAX_EVENTS_PAGE = 1000
# Notifications: agent text a webhook body or an email carries (each field),
# what a delivery keeps of the receiver's answer, deliveries and emails one
# process sends per round, and the requests one digest lists.
MAX_NOTIFY_TEXT_CHARS = 2000
MAX_RESPONSE_EXCERPT = 2000
NOTIFY_BATCH = 20
MAX_DIGEST_ITEMS = 100
DELIVERIES_PAGE_SIZE = 50

# The Agents page: how many of an agent's latest resumes it sums up, and how
# much of the agent's reason for refusing the latest refused one it quotes.
AGENT_RECENT_RESUMES = 5
AGENT_REFUSAL_CHARS = 300
