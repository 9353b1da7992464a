"""Every COUNTERSIGN_* setting (name, default, meaning) and every limit, declared once.

``conf.settings.X`` is Django's setting X where the project sets one, else the
default here; docs/settings.md's table is generated from ``SETTINGS``
(``manage.py settings_table``). docs/settings.md says how they are read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings

from .protocol.contract.history import MAX_HISTORY_MESSAGES  # noqa: F401

# A thread's conversation as its events build it: at most this many messages (protocol.conversation).
from .protocol.conversation import MAX_MESSAGES as MAX_THREAD_MESSAGES  # noqa: F401
from .protocol.dialects.tanstack import MAX_BINDING_CHARS as MAX_TANSTACK_BINDING_CHARS  # noqa: F401
from .protocol.dialects.tanstack import MAX_PAYLOAD_BYTES as MAX_TANSTACK_PAYLOAD_BYTES  # noqa: F401

# The wire's own bounds live in the pure protocol layer, which cannot import this
# module; they are named here too, so this is the one list of every bound.
from .protocol.schema.limits import (  # noqa: F401  (named here: every limit in one place)
    MAX_PATTERN_CHARS,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_PATTERN_CHARS,
    MAX_VALIDATION_STEPS,
)
from .protocol.wire import MAX_DEPTH as MAX_JSON_DEPTH  # noqa: F401
from .sdk.driver import MAX_REQUEST_BYTES as SDK_MAX_REQUEST_BYTES

MIB = 1024 * 1024

# --- Settings: name, default, what it does -------------------------------------


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    doc: str


SETTINGS: tuple[Setting, ...] = (
    Setting("COUNTERSIGN_CONNECT_TIMEOUT", 5.0, "Seconds to wait for an agent to accept a connection."),
    Setting("COUNTERSIGN_IDLE_TIMEOUT", 120.0, "Seconds an agent's stream may stay silent before the run fails."),
    Setting("COUNTERSIGN_AFTER_TERMINAL_GRACE", 2.0,
            "Seconds to wait, after RUN_FINISHED or RUN_ERROR, for the agent to close its stream "
            "(and for any event that must not come) before the run is finished."),
    Setting("COUNTERSIGN_LEASE_SECONDS", 30.0,
            "A streaming run whose process stops renewing its claim this long is settled by another "
            "process (the outbox's contract)."),
    Setting("COUNTERSIGN_POLL_INTERVAL", 1.0,
            "How often each process looks for queued runs and due expiries without a wake-up."),
    Setting("COUNTERSIGN_UNDO_SECONDS", 5.0,
            "Seconds a person's decision that completes a batch holds its resume, so it can still be "
            "undone (`decisions.undo`); `0` sends at once."),
    Setting("COUNTERSIGN_ACK_GRACE_SECONDS", 60.0,
            "Seconds a decision waits for its answer to reach its reviewer; one still unanswered was made "
            "by a process that died before replying, and is taken back, never sent to the agent."),
    Setting("COUNTERSIGN_SWEEP_INTERVAL", 5.0,
            "How often each process escalates requests past their target and lapses idle claims "
            "(minutes-long deadlines, so not every poll)."),
    Setting("COUNTERSIGN_CLAIM_IDLE_SECONDS", 900.0,
            "A reviewer's claim on a card lapses this long after they last touched it "
            "(claimed, renewed, had it open)."),
    Setting("COUNTERSIGN_EXPIRY_WARNING_SECONDS", 600.0,
            "How long before an interrupt's expiresAt the people who may decide it are warned (webhooks and the "
            "email they chose), once; a policy that escalates on expiry escalates then. `0`: no warning."),
    Setting("COUNTERSIGN_DECISION_LINK_HOURS", 24.0,
            "How long the Approve, Reject and Open links in a notification email work (each once, for its reader "
            "only, and only after they log in and confirm on the page it opens)."),
    Setting("COUNTERSIGN_INSIGHT_LOOKED_BY_REVIEWER", False,
            "Whether the insight page shows, per reviewer, the share of approvals made without opening the card "
            "beyond its summary and their time on card: off, it shows them per agent only, never a person's as "
            "a score, until the team chooses to."),
    Setting("COUNTERSIGN_GRANT_SUGGEST_AFTER", 5,
            "A card offers a standing grant once the team approved this many calls identical to it (agent, "
            "tool and args) in the last 30 days and refused none; `0` never offers one."),
    Setting("COUNTERSIGN_PRESENCE_SECONDS", 45.0,
            "Someone has a card open while their page renewed it this recently; pages renew every third of it."),
    Setting("COUNTERSIGN_MAX_STREAMS", 50,
            "Runs one process streams at once (hub and gateway); a fifth of them (at least one) only resumes may use."),
    Setting("COUNTERSIGN_MAX_RUN_SECONDS", 3600.0,
            "Longest a run may stream, however often its agent sends; then it fails with `RUN_TOO_LONG`."),
    Setting("COUNTERSIGN_MAX_AGENT_STREAMS", None,
            "Runs of one agent streaming at once over every process; more wait (hub) or get "
            "`AGENT_AT_CAPACITY` (gateway). Unset: 10, or one below a smaller `COUNTERSIGN_MAX_STREAMS`; "
            "it must stay below it, or one agent could still fill a process."),
    Setting("COUNTERSIGN_RETRY_BASE", 1.0,
            "Seconds before the first retry of an unreachable agent (refused, connect timeout, HTTP "
            "429/502/503 before any event); each later wait doubles."),
    Setting("COUNTERSIGN_RETRY_MAX_DELAY", 300.0, "The longest wait between two tries of an unreachable agent."),
    Setting("COUNTERSIGN_RETRY_ATTEMPTS", 50,
            "Tries before the run fails with `AGENT_UNREACHABLE` (the defaults keep trying about four hours)."),
    Setting("COUNTERSIGN_AGENT_NETWORKS", "",
            "Where agents (and webhooks) may be, checked at connect time: comma-separated CIDRs to allow "
            "(none: any) and `!CIDR` to exclude, e.g. `10.0.0.0/8,!10.9.0.0/16`. Link-local, cloud metadata, "
            "unspecified and multicast addresses are always refused (`AGENT_ADDRESS_REFUSED`)."),
    Setting("COUNTERSIGN_SELF_URL", "http://127.0.0.1:8000",
            "Where this app serves its own demo agents; `manage.py serve` sets it to the address it listens on."),
    Setting("COUNTERSIGN_MAX_EVENT_BYTES", 8 * MIB, "Largest event an agent may send (`EVENT_TOO_LARGE`)."),
    Setting("COUNTERSIGN_MAX_RUN_EVENTS", 100_000, "Most events one run may bring (`TOO_MANY_EVENTS`)."),
    Setting("COUNTERSIGN_MAX_RUN_BYTES", 128 * MIB, "Most bytes one run's stream may bring (`STREAM_TOO_LARGE`)."),
    # The SDK's own bound (an agent served without Django reads it there): one number.
    Setting("COUNTERSIGN_MAX_REQUEST_BYTES", SDK_MAX_REQUEST_BYTES,
            "Largest request body (API, gateway, forms; Django's `DATA_UPLOAD_MAX_MEMORY_SIZE`): "
            "`413 TOO_LARGE`. Above the event limit, so a gateway client can send back a conversation "
            "holding an event the hub accepted."),
    Setting("COUNTERSIGN_HTTP_IDLE_TIMEOUT", 30.0,
            "Seconds a client may stay silent while sending a request, or between two requests, "
            "before `manage.py serve` closes the connection."),
    Setting("COUNTERSIGN_DB_LOCK_TIMEOUT", 20.0,
            "Seconds a statement waits for a lock (SQLite's busy timeout, PostgreSQL's `lock_timeout`); "
            "then `503 BUSY` with `Retry-After`, so no request waits forever behind a stuck one."),
    Setting("COUNTERSIGN_DB_POOL_SIZE", 20,
            "PostgreSQL connections per process (psycopg's pool); keep processes × size under the "
            "server's `max_connections`."),
    Setting("COUNTERSIGN_DB_POOL_TIMEOUT", 20.0,
            "Seconds a request waits for a free PostgreSQL connection before `503 BUSY`; while the "
            "database is down, each request waits this long."),
    Setting("COUNTERSIGN_CHANNEL_PREFIX", "asgi",
            "Prefix of the channel layer's keys, so several deployments (or test servers) may share one Redis."),
    Setting("COUNTERSIGN_LOGIN_FAILURE_LIMIT", 5,
            "Failed logins of one username from one address before it is locked out "
            "(django-axes' `AXES_FAILURE_LIMIT`)."),
    Setting("COUNTERSIGN_LOGIN_COOLOFF", 900.0, "Seconds a lock-out lasts (django-axes' `AXES_COOLOFF_TIME`)."),
    Setting("COUNTERSIGN_API_RATE_ANON", "600/min",
            "API requests per address without a login (DRF's throttle, per process)."),
    Setting("COUNTERSIGN_API_RATE_USER", "6000/min", "API requests per user (DRF's throttle, per process)."),
    Setting("COUNTERSIGN_API_RATE_FAILED_TOKENS", "30/min",
            "Wrong tokens per address (API and gateway), then `429 THROTTLED`."),
    Setting("COUNTERSIGN_TOKEN_DAYS", 0.0,
            "Days a new API token lasts; `0`: until revoked, as machine tokens usually are "
            "(`tokens create --days N` sets one token's)."),
    Setting("COUNTERSIGN_DEMO_REQUIRE_SIGNATURE", False,
            "The demo agents refuse an unsigned request too. Off, so the docs' direct `curl` works; "
            "a forged or stale signature is refused either way."),
    Setting("DEMO_FILING_EXPIRES_IN", 3600, "Seconds the demo filing agent's form stays answerable."),
    Setting("COUNTERSIGN_WEBHOOK_TIMEOUT", 10.0,
            "Seconds one webhook delivery may take, answer included; then it is tried again."),
    Setting("COUNTERSIGN_WEBHOOK_RETRY_BASE", 5.0,
            "Seconds before a failed webhook delivery is tried again; each later wait doubles."),
    Setting("COUNTERSIGN_WEBHOOK_RETRY_MAX_DELAY", 3600.0, "The longest wait between two tries of a webhook delivery."),
    Setting("COUNTERSIGN_WEBHOOK_ATTEMPTS", 30,
            "Tries before a webhook delivery is marked failed (the defaults keep trying about a day)."),
    Setting("COUNTERSIGN_EMAIL_ATTEMPTS", 10, "Tries before an email is marked failed (the webhooks' backoff)."),
    Setting("COUNTERSIGN_EMAIL_DIGEST_SECONDS", 3600, "A digest reader gets at most one email per this many seconds."),
    Setting("COUNTERSIGN_NOTIFY_LEASE_SECONDS", 120.0,
            "A webhook delivery or email a process took but never reported is sent again after this long."),
    # Never set in production; unset, it costs nothing.
    Setting("COUNTERSIGN_CRASH_AT", "",
            "**Tests only**: the process kills itself (SIGKILL) at a named point of a resume's first send "
            "(`claimed`, `sent`, `answered`, `events:<n>`, `recorded`; `interrupts/hub/crashpoints.py`)."),
)

DEFAULTS: dict[str, Any] = {setting.name: setting.default for setting in SETTINGS}


def shown(default: Any) -> str:
    """A default as the settings table writes it."""
    if default is None or default == "":
        return "unset"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, float) and default.is_integer():
        return f"`{int(default)}`"
    if isinstance(default, int) and default >= MIB and default % MIB == 0:
        return f"`{default}` ({default // MIB} MiB)"
    return f"`{default}`"


def settings_table() -> str:
    """docs/settings.md's table of every setting above, in Markdown."""
    rows = ["| setting | default | what it does |", "| --- | --- | --- |"]
    rows += [f"| `{s.name}` | {shown(s.default)} | {s.doc} |" for s in SETTINGS]
    return "\n".join(rows) + "\n"


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
#: The most a passkey's answer (a WebAuthn registration or assertion, as JSON) may hold, in characters.
MAX_PASSKEY_JSON_CHARS = 20_000
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
# How often a streaming run writes its thread's conversation (messages and state), each time whole:
# a slow agent's every token rewrote it, 17 ms a token on a thread of 1 MB. Readers fold what is
# newer (hub.events.conversation_of), which is at most this many events, of this many bytes, or
# this long's worth.
FOLD_WRITE_SECONDS = 0.5
FOLD_WRITE_EVENTS = 256
FOLD_WRITE_BYTES = 64 * 1024
# Approvals a policy may require of one interrupt: a quorum larger than a
# team plausibly has is a typo that would hold every request forever.
MAX_REQUIRED_APPROVALS = 10
# A standing grant's bounds: at most 30 days, and uses a team would count; the grants one call is checked against.
MAX_GRANT_HOURS = 720
MAX_GRANT_USES = 10_000
MAX_GRANTS_CHECKED = 20
# Fields of a call a grant made on its card may hold to their values.
MAX_GRANT_HELD = 50
# A grant's simulation: the days of history it replays by default and at most, the newest calls it
# replays at most (each a bounded schema check), and the refused ones it lists.
SIMULATION_DAYS = 30
MAX_SIMULATION_DAYS = 90
SIMULATION_MAX_CALLS = 5000
SIMULATION_SHOWN = 20
# Decisions a page of cards reads to find the calls worth a suggested grant.
MAX_SUGGESTION_ROWS = 20_000
#: How long a grant made on a card lasts, in hours, as its menu offers it.
GRANT_HOURS = ((1, "1 hour"), (4, "4 hours"), (8, "8 hours"), (24, "1 day"), (72, "3 days"), (168, "1 week"))
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
# Idle request threads a serving process keeps for the next requests (web/handler.py); a burst
# past it starts threads of its own, which end after it.
REQUEST_THREADS_KEPT = 32
# Seconds between two refreshes of SQLite's query planner statistics by a
# process's supervisor (hub/statistics.py); the first is at its first round.
PLANNER_STATISTICS_EVERY = 600
# Pages: interrupts on an inbox page, trail entries on an audit page, and the
# events a thread's page shows at most.
INBOX_PAGE_SIZE = 25
# How far the inbox and the header count what waits: past it they say "1000+". An exact count reads
# every pending row (18 ms on PostgreSQL at 100,000, on every page and for every open inbox per change).
INBOX_COUNTED = 1000
# The inbox's view, as the reader chose it (triage.js writes it): "all" stacks every card, rendered
# whole; anything else is one request at a time, the others' cards folded until opened.
INBOX_VIEW_COOKIE = "countersign_inbox_view"
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
# The Threads page's agent menu: how much of each agent's description follows its name.
AGENT_BLURB_CHARS = 90
# A request named in a list (the thread page's decisions): how much of its message.
REQUEST_LABEL_CHARS = 80
