"""What Countersign stores: agents, threads, runs, every event, interrupts, decisions.

Invariants that matter for the audit trail are held by the database, not only
by Python: an event's per-thread sequence number is unique and an event row
never changes; an interrupt id is unique within its run; a decision row never
changes (beyond being superseded once) and an interrupt has at most one live
decision. The triggers that forbid changing history are in migration 0002.
"""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator, URLValidator
from django.db import models
from django.db.models import Q
from knox.models import AuthToken

from .conf import MAX_CREDENTIAL_CHARS, MAX_REQUIRED_APPROVALS, MAX_TITLE_CHARS
from .protocol import dialects
from .transitions import DecisionQuerySet, InterruptQuerySet, RunQuerySet

DIALECT_CHOICES = [(name, dialect.label) for name, dialect in dialects.DIALECTS.items()]


def masked(secret: str) -> str:
    """A secret as people may see it: its last four characters, and only when it is long enough to spare them."""
    if not secret:
        return ""
    tail = secret[-4:] if len(secret) >= 12 else ""
    return f"••••{tail}"


def new_signing_secret() -> str:
    """A fresh secret for signing what Countersign sends an agent (HMAC-SHA256 key, 256 bits)."""
    return "css_" + secrets.token_urlsafe(32)


def _origin(url: str) -> tuple:
    """(scheme, host, port) of ``url``, the default port filled in: what a credential is bound to."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # not a port at all: an origin of its own, equal only to the same text
        return (parts.scheme.lower(), parts.netloc.lower(), None)
    scheme = parts.scheme.lower()
    return (scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme))


class Agent(models.Model):
    """A registered AG-UI endpoint that Countersign calls.

    A stored credential is bound to the origin (scheme, host, port) it was
    given for: ``save()`` drops it when the URL moves to another origin and
    the credential was not given again in the same change, so whoever can
    edit an agent's URL cannot send its secret to a server of their own.
    The rule lives here so that the form, the admin, the API and
    ``manage.py agents`` all obey it; each reports ``credential_dropped``.
    """

    CREDENTIAL_DROPPED = (
        "Credential dropped: the URL moved to another origin (scheme, host or port), "
        "and a credential is never sent anywhere but where it was given for; give it again."
    )

    name = models.SlugField(
        max_length=64,
        unique=True,
        help_text="Short name used in URLs and on the command line, e.g. 'mailer'.",
    )
    url = models.URLField(
        max_length=2000,
        # URLField alone also takes ftp(s): Countersign speaks HTTP only. A code
        # of its own, or a ModelForm shows its generic "Enter a valid URL.".
        validators=[URLValidator(schemes=["http", "https"], message="Give an http:// or https:// URL.",
                                 code="invalid_scheme")],
        help_text="Where RunAgentInput is POSTed (http or https).",
    )
    description = models.TextField(blank=True)
    auth_header = models.CharField(
        max_length=100,
        blank=True,
        validators=[
            RegexValidator(
                # "+", not "*": blank is allowed by blank=True, and the OpenAPI
                # schema then has one way, not two, to match an empty name.
                r"^[A-Za-z0-9-]+$", "A header name holds letters, digits and dashes only."
            )
        ],
        help_text="Name of the header carrying the agent's credential, e.g. 'Authorization'.",
    )
    # Stored server-side and sent only to the agent; never rendered back in full.
    auth_value = models.CharField(max_length=MAX_CREDENTIAL_CHARS, blank=True)
    capabilities = models.JSONField(default=dict, blank=True)
    # The key of every Countersign-Signature sent to this agent. Shown once,
    # when generated (registration, rotation); the agent keeps its own copy.
    signing_secret = models.CharField(max_length=100, default=new_signing_secret, editable=False)
    builtin = models.BooleanField(
        default=False, help_text="One of the demo agents Countersign serves itself."
    )
    # How the agent raises and takes interrupts (protocol.dialects): the AG-UI
    # contract itself, or a framework's older form of it.
    dialect = models.CharField(
        max_length=32, choices=DIALECT_CHOICES, default=dialects.AGUI,
        help_text="How the agent raises interrupts: AG-UI's interrupt outcome (the default), or LangGraph's "
                  "on_interrupt event (ag-ui-langgraph without emit_interrupt_outcome).",
    )
    # How its last paused run paused (protocol.dialects.pause_kind), set when a run
    # of it is interrupted: the default dialect answers a LangGraph pause that way.
    paused_as = models.CharField(max_length=32, blank=True, default="", editable=False)
    # The protocolVersion its last RUN_STARTED declared (protocol.versioning): "" declared
    # nothing, a peer from before versioning (AG-UI 1.0 C65); None, never heard from.
    protocol_version = models.CharField(max_length=40, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    # Set by a caller that takes a credential from the user in this change
    # (even the same text again): it then stays when the URL moves.
    credential_given = False
    # Set by save(): the stored credential was dropped, and the user must be told.
    credential_dropped = False

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        self.credential_dropped = False
        if self.pk is not None and self.auth_value and not self.credential_given:
            stored = Agent.objects.filter(pk=self.pk).values_list("url", "auth_value").first()
            if stored and stored[1] == self.auth_value and _origin(stored[0]) != _origin(self.url):
                self.auth_value = ""
                self.credential_dropped = True
                if kwargs.get("update_fields") is not None:
                    kwargs["update_fields"] = {*kwargs["update_fields"], "auth_value"}
        super().save(*args, **kwargs)
        self.credential_given = False

    @property
    def endpoint(self) -> str:
        """Where this process POSTs RunAgentInput.

        Every process serves the built-in demo agents itself, so each calls
        its own: the stored URL names whichever process registered them last,
        which may since have stopped.
        """
        if self.builtin:
            return f"{settings.COUNTERSIGN_SELF_URL.rstrip('/')}/agents/{self.name}/"
        return self.url

    @property
    def masked_auth_value(self) -> str:
        """The credential as people may see it: its last four characters at most."""
        return masked(self.auth_value)

    def rotate_signing_secret(self) -> str:
        """Replace the signing secret and return the new one, the only time it is shown.

        The one place a secret is rotated (admin, Agents page, API,
        ``manage.py agents rotate-secret``). Requests already signed with the
        old secret stay valid for the agent's tolerance; new ones use this.
        """
        self.signing_secret = new_signing_secret()
        self.save(update_fields=["signing_secret"])
        return self.signing_secret


class Thread(models.Model):
    """One AG-UI threadId: the conversation an agent and its reviewers share."""

    thread_id = models.CharField(max_length=200, unique=True)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="threads")
    title = models.CharField(max_length=MAX_TITLE_CHARS, blank=True)
    # The latest STATE_SNAPSHOT and MESSAGES_SNAPSHOT, so a new run's input can
    # be built without replaying the event log.
    state = models.JSONField(null=True, blank=True)
    messages = models.JSONField(default=list, blank=True)
    # The sequence number of the last event appended; events take last_seq + 1.
    last_seq = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.title or self.thread_id


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    STREAMING = "streaming", "Streaming"
    INTERRUPTED = "interrupted", "Interrupted"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class Settlement(models.TextChoices):
    """What people did about a resume the agent refused (a failed resumed run)."""

    RESENT = "resent", "Sent again"
    REOPENED = "reopened", "Reopened for new answers"
    CLOSED = "closed", "Closed"


class Run(models.Model):
    """One runId: the input Countersign sent, how the run went and how it ended."""

    Status = RunStatus
    objects = RunQuerySet.as_manager()
    Settlement = Settlement

    FINAL_STATUSES = (RunStatus.INTERRUPTED, RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)

    thread = models.ForeignKey(Thread, on_delete=models.PROTECT, related_name="runs")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="runs")
    run_id = models.CharField(max_length=200)
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="children",
        help_text="The run this one continues (for a resume: the interrupted run).",
    )
    # The RunAgentInput exactly as sent, in wire (camelCase) form.
    input = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    # RUN_FINISHED's outcome in wire form; null until the run ends or when legacy.
    outcome = models.JSONField(null=True, blank=True)
    error_code = models.CharField(max_length=100, blank=True)
    error_message = models.TextField(blank=True)
    # A fault of the stream found alongside the agent's own error (its
    # RUN_ERROR came before RUN_STARTED): "CODE: message". error_code stays the agent's.
    fault = models.TextField(blank=True)
    # What Countersign noticed about how the run ended that its agent's
    # registration should change (e.g. LangGraph's on_interrupt and no outcome).
    notice = models.TextField(blank=True)
    # The tool calls the run left for its client to run and answer, [{"id", "name"}] in the
    # order made (AG-UI 1.0 C21, C22: derived from its stream); None when it left none.
    pending_tool_calls = models.JSONField(null=True, blank=True)
    # For a resumed run that failed (the agent refused the answer): what was done
    # about it, by whom and when; blank while nobody has (``hub.refused``).
    settlement = models.CharField(max_length=16, choices=Settlement.choices, blank=True)
    settled_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")
    settled_at = models.DateTimeField(null=True, blank=True)
    # A resume's idempotency key (thread + every (interruptId, status, payload)):
    # unique, so the same answers can never start two runs.
    resume_key = models.CharField(max_length=64, null=True, blank=True, unique=True)
    class Origin(models.TextChoices):
        HUB = "hub", "Countersign"
        GATEWAY = "gateway", "AG-UI gateway"

    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.HUB)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    # Who asked for the work this run continues: the user who started the
    # conversation (for a gateway run, the token's user), carried from a run
    # to its resumes. Policies forbid this person to approve it themselves.
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    # Which process streams this run, and until when its claim holds without a
    # heartbeat: a claim that lapses means that process died mid-stream.
    claimed_by = models.CharField(max_length=100, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    # Delivery: a queued run whose agent could not be reached waits for
    # ``retry_at``; ``attempts`` counts the failed tries, ``last_error`` says why.
    attempts = models.PositiveIntegerField(default=0)
    retry_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    # The outbox's delivery record (``hub.outbox``): set, and committed, just before
    # the request to the agent leaves; null while nothing of this try can have left.
    # After a crash it says whether the run may be sent again without asking anyone.
    sent_at = models.DateTimeField(null=True, blank=True)
    # How often a process died holding this run: a run that keeps taking its
    # process down is given up on (COUNTERSIGN_RETRY_ATTEMPTS) instead of re-sent for ever.
    losses = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "run_id"], name="run_id_unique_per_thread"),
            models.CheckConstraint(
                condition=Q(status__in=RunStatus.values), name="run_status_valid"
            ),
        ]
        indexes = [models.Index(fields=["status", "created_at"], name="run_status_created")]

    def __str__(self) -> str:
        return self.run_id

    @property
    def awaiting_agent(self) -> bool:
        """Queued again because its agent could not be reached: waiting to be retried."""
        return self.status == RunStatus.QUEUED and self.attempts > 0

    @property
    def delivery(self) -> str:
        """What people are told about a run waiting for its agent, or ''."""
        if not self.awaiting_agent:
            return ""
        kind = "resume" if self.resume_key else "run"
        return f"{kind} pending — agent unreachable, attempt {self.attempts}"

    @property
    def waiting_on_client(self) -> str:
        """'waiting on a tool the client runs: <names>' for a run that left tool calls unanswered (C21), or ''.

        Such a run did not simply succeed: its client owes each call an answer
        before the thread can go on (C23), and Countersign runs no client tool.
        """
        names = [str((call or {}).get("name") or "unnamed")[:80] for call in self.pending_tool_calls or []
                 if isinstance(call, dict)]
        if not names:
            return ""
        shown = ", ".join(dict.fromkeys(names[:5])) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return f"waiting on a tool the client runs: {shown}"

    @property
    def shown_status(self) -> str:
        """``status`` as people and the API read it: a success that left calls for its client is not 'succeeded'."""
        if self.status == RunStatus.SUCCEEDED and self.pending_tool_calls:
            return "waiting_on_client"
        return self.status

    @property
    def refused(self) -> bool:
        """A resumed run the agent did not take, that nobody has dealt with yet: its batch waits for people."""
        return self.status == RunStatus.FAILED and self.resume_key is not None and not self.settlement

    @property
    def refusal_text(self) -> str:
        """How a failed resume reads to people: the agent's code and message ("" for any other run)."""
        if self.resume_key is None or self.status != RunStatus.FAILED:
            return ""
        message = self.error_message.strip()
        # Countersign's own endings say what happened; any other code is the agent's.
        said = {"CANCELLED_BY_OPERATOR": "An operator stopped the resume",
                "WORKER_LOST": "The resume was lost mid-run (the agent may have acted on it)",
                "AGENT_UNREACHABLE": "The agent could not be reached with the answer"}.get(
            self.error_code, "The agent refused the answer")
        return f"{said}: {self.error_code}" + (f" {message}" if message else "")

    def resumed_by(self) -> Run | None:
        """The run that sent this run's decisions back to the agent, once the batch was sent.

        The latest resume (a refused one sent again is followed by its
        re-send); None once the latest was reopened: those answers no longer
        stand, and the batch waits for new ones.
        """
        latest = self.children.filter(resume_key__isnull=False).order_by("-pk").first()
        return None if latest is None or latest.settlement == Settlement.REOPENED else latest


class ExactJSONField(models.JSONField):
    """JSON kept as the text that was written: PostgreSQL's ``json``, not ``jsonb``.

    ``jsonb`` re-spells what it stores (keys sorted, spacing and number
    spellings normalised), so the log could not show an agent's exact bytes.
    ``json`` keeps the text and still answers ``->`` and ``->>``; it has no
    ``=`` or ``@>``, so lookups that compare a key's value need a cast to
    ``jsonb``. SQLite keeps JSON as text already.
    """

    def db_type(self, connection):
        return "json" if connection.vendor == "postgresql" else super().db_type(connection)

    def from_db_value(self, value, expression, connection):
        # psycopg decodes json itself (Django sets a text loader for jsonb only).
        if value is None or not isinstance(value, (str, bytes, bytearray)):
            return value
        return super().from_db_value(value, expression, connection)


class Event(models.Model):
    """One AG-UI event exactly as received: append-only, numbered per thread."""

    # No index of their own: (thread, seq) and (run, seq) below serve every
    # lookup, and each extra index is written for every event relayed.
    thread = models.ForeignKey(Thread, on_delete=models.PROTECT, related_name="events", db_index=False)
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="events", db_index=False)
    seq = models.PositiveBigIntegerField(help_text="Position in the thread's event log.")
    type = models.CharField(max_length=64)
    # An agent's event is written as the text it sent (log.append_many), so its
    # exact bytes stay in the audit; reading it gives the decoded JSON.
    payload = ExactJSONField(help_text="The event in wire (camelCase) form, as the agent sent it.")
    # False for events Countersign itself wrote into the log (a RUN_ERROR for a
    # stream that broke), so the audit trail never passes them off as the agent's.
    from_agent = models.BooleanField(default=True)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["thread", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "seq"], name="event_seq_unique_per_thread"),
            models.CheckConstraint(condition=Q(seq__gte=1), name="event_seq_positive"),
        ]
        indexes = [models.Index(fields=["run", "seq"], name="event_run_seq")]

    def __str__(self) -> str:
        return f"{self.thread_id}#{self.seq} {self.type}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not self._state.adding:
            raise ValueError("Events are append-only: an event row is never changed.")
        super().save(*args, **kwargs)


class InterruptStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RESOLVED = "resolved", "Resolved"
    CANCELLED = "cancelled", "Cancelled"
    EXPIRED = "expired", "Expired"


class Interrupt(models.Model):
    """One item of a run's interrupt outcome, and where it stands."""

    Status = InterruptStatus
    objects = InterruptQuerySet.as_manager()

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="interrupts")
    interrupt_id = models.CharField(max_length=200)
    reason = models.CharField(max_length=200)
    message = models.TextField(blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    # Reassembled from the run's TOOL_CALL_START/ARGS when toolCallId is set:
    # what the agent proposed, the first column of the audit trail.
    tool_name = models.CharField(max_length=200, blank=True)
    proposed_args = models.JSONField(null=True, blank=True)
    response_schema = models.JSONField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    metadata = models.JSONField(null=True, blank=True)
    # The interrupt exactly as the agent sent it, and what was wrong with it
    # (e.g. an unparsable expiresAt), so nothing the agent said is lost.
    raw = models.JSONField()
    problems = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # Bumped on every change of status or draft answer: conditional updates on
    # (pk, version) decide races between reviewers on any database.
    version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    # Why it closed without a decision of its own (expiry, a sibling's expiry).
    closed_reason = models.CharField(max_length=300, blank=True)
    # The policy that governs it (null: the site default), resolved when it is
    # raised and again whenever policies change: what the inbox's "waiting for
    # me" filters on. Deciding resolves it afresh (``policies.rule_for``).
    policy = models.ForeignKey("Policy", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Who said "I am reviewing this" (``claims``): held while renewed within
    # COUNTERSIGN_CLAIM_IDLE_SECONDS, then it lapses. A claim bars nobody; a
    # colleague deciding a claimed card is asked to confirm first.
    claimed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    claimed_at = models.DateTimeField(null=True, blank=True)
    claim_renewed_at = models.DateTimeField(null=True, blank=True)
    # Its policy's target time passed undecided (``escalation``): the policy's
    # backup group, as it was then, may decide it too and was told.
    escalated_at = models.DateTimeField(null=True, blank=True)
    escalated_to = models.ForeignKey(Group, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The standing decision whose answer has not reached its reviewer yet (``decisions.acknowledge``):
    # the batch's resume waits for it, and a process that died before replying leaves it to be dropped.
    unacknowledged = models.ForeignKey("Decision", null=True, blank=True, on_delete=models.SET_NULL,
                                       related_name="+")

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "interrupt_id"], name="interrupt_id_unique_per_run"
            ),
            models.CheckConstraint(
                condition=Q(status__in=InterruptStatus.values), name="interrupt_status_valid"
            ),
        ]
        permissions = [("decide_interrupt", "Can approve, reject, answer or cancel interrupts")]
        indexes = [
            # The inbox's order, and what "waiting for me" filters on: a deep page
            # or the badge's count reads this index alone (no table rows).
            models.Index(fields=["status", "created_at", "id", "policy", "run"], name="interrupt_inbox"),
            # The inbox's reason filter and its list of reasons (DISTINCT) read this index alone.
            models.Index(fields=["status", "reason"], name="interrupt_status_reason"),
        ]

    def __str__(self) -> str:
        return f"{self.interrupt_id} ({self.reason})"


class DecisionStatus(models.TextChoices):
    RESOLVED = "resolved", "Resolved"
    CANCELLED = "cancelled", "Cancelled"


class Decision(models.Model):
    """Who answered an interrupt, how and when. Never changed once written.

    A reviewer may revise an answer until the batch is sent: the revision is a
    new row and the old one is marked superseded (the only change a decision
    row ever sees), so the trail keeps every answer anyone gave. Under a
    policy requiring N approvals an interrupt gathers up to N live decisions,
    one per person; a new answer that differs from theirs supersedes them
    (see ``decisions``).
    """

    Status = DecisionStatus
    objects = DecisionQuerySet.as_manager()

    interrupt = models.ForeignKey(Interrupt, on_delete=models.PROTECT, related_name="decisions")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="decisions"
    )
    status = models.CharField(max_length=16, choices=Status.choices)
    payload = models.JSONField(null=True, blank=True)
    # The tool args that will run when the payload carries editedArgs: a full
    # replacement of the proposal, kept apart so the audit can diff them.
    edited_args = models.JSONField(null=True, blank=True)
    metadata = models.JSONField(null=True, blank=True)
    comment = models.TextField(blank=True)
    # What the reviewer did (approve, edit, respond, reject, cancel), and the
    # policy that made them eligible, as it was then: the resume's attestation.
    action = models.CharField(max_length=16, blank=True)
    policy = models.CharField(max_length=100, blank=True)
    required_approvals = models.PositiveSmallIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    superseded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["interrupt", "user"],
                condition=Q(superseded_at__isnull=True),
                name="one_live_decision_per_reviewer",
            ),
            models.CheckConstraint(
                condition=Q(status__in=DecisionStatus.values), name="decision_status_valid"
            ),
            # The contract: a cancelled answer carries no payload.
            models.CheckConstraint(
                condition=~Q(status="cancelled") | Q(payload__isnull=True),
                name="cancelled_decision_has_no_payload",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.interrupt.interrupt_id}: {self.status} by {self.user}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not self._state.adding:
            raise ValueError("Decisions are immutable: write a new decision instead.")
        super().save(*args, **kwargs)


class Policy(models.Model):
    """Who may decide an agent's interrupts, how many must approve, and how fast.

    A policy applies to one agent (or, with no agent, to every agent),
    optionally narrowed to a reason and/or a tool name; for each interrupt
    the most specific policy wins (see ``policies.policy_for``), and with
    none the site default applies (every holder of ``decide_interrupt``, one
    approval, no self-approval). Naming no groups and no users admits every
    holder of the permission; naming some admits only them.
    """

    # Named in URLs (/api/policies/<name>/): no slash, and not a path step ("." or "..") clients drop.
    name = models.CharField(max_length=100, unique=True,
                            validators=[RegexValidator(r"^(?!\.{1,2}$)[^/]+$",
                                                       "A policy name holds no slash and is not '.' or '..'.")])
    agent = models.ForeignKey(
        Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="policies",
        help_text="The agent whose interrupts this governs; empty for every agent.",
    )
    reason = models.CharField(max_length=200, blank=True, help_text="Only interrupts with this reason; empty for any.")
    tool_name = models.CharField(max_length=200, blank=True, help_text="Only interrupts about this tool; empty for any.")
    groups = models.ManyToManyField(Group, blank=True, related_name="+",
                                    help_text="Groups whose members may decide; with no groups and no users, "
                                              "everyone allowed to decide interrupts.")
    users = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="+",
                                   help_text="People who may decide, besides the groups' members.")
    # Whether groups or users were named, kept apart from the names themselves:
    # deleting the one group a policy names must leave it admitting nobody,
    # not everyone (``policies.members_changed`` keeps it in step).
    restricted = models.BooleanField(default=False, editable=False)
    required_approvals = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(MAX_REQUIRED_APPROVALS)],
        help_text="How many distinct eligible people must approve; one rejection or cancel ends it.",
    )
    allow_self_approval = models.BooleanField(
        default=False, help_text="Whether the person who started the run may decide its interrupts.",
    )
    target_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="How soon a decision is expected, in minutes.",
    )
    backup_group = models.ForeignKey(
        Group, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="When the target time passes undecided, this group may decide too, and is told.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "policies"
        constraints = [
            # Two policies for exactly the same interrupts would leave "the
            # most specific one" undefined. Two constraints, because NULL
            # agents are distinct from each other in a plain unique index.
            models.UniqueConstraint(fields=["agent", "reason", "tool_name"], condition=Q(agent__isnull=False),
                                    name="policy_scope_unique_per_agent",
                                    violation_error_message="A policy already applies to this agent, reason "
                                                            "and tool name: edit that one instead."),
            models.UniqueConstraint(fields=["reason", "tool_name"], condition=Q(agent__isnull=True),
                                    name="policy_scope_unique_for_every_agent",
                                    violation_error_message="A policy for every agent already applies to this "
                                                            "reason and tool name: edit that one instead."),
            models.CheckConstraint(
                condition=Q(required_approvals__gte=1, required_approvals__lte=MAX_REQUIRED_APPROVALS),
                name="policy_required_approvals_in_range",
            ),
        ]

    BACKUP_NEEDS_TARGET = "A backup group takes over when the target time passes: set the target minutes too."

    def __str__(self) -> str:
        return self.name

    def clean(self):
        if self.backup_group_id is not None and not self.target_minutes:
            raise ValidationError({"backup_group": self.BACKUP_NEEDS_TARGET})

    @property
    def specificity(self) -> tuple[bool, bool, bool]:
        """How narrowly this policy applies, compared in order: names a tool, names the agent, names a reason.

        The tool first: it is what acts, and an agent, which chooses its own
        reason (and could be given a lax policy on one), must never escape a
        policy on the tool it calls.
        """
        return (bool(self.tool_name), self.agent_id is not None, bool(self.reason))


class Presence(models.Model):
    """Someone has a card open right now: one row per (socket, interrupt), renewed by the page.

    In the database, not in one process's memory: with several processes a
    reviewer's socket and their colleague's are rarely in the same one.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    interrupt = models.ForeignKey(Interrupt, on_delete=models.CASCADE, related_name="presences")
    socket = models.CharField(max_length=100, help_text="The channel name of the socket that said so.")
    seen_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["socket", "interrupt"], name="presence_unique_per_socket")]
        indexes = [models.Index(fields=["interrupt", "seen_at"], name="presence_interrupt_seen")]


class APIToken(AuthToken):
    """An API token as Countersign keeps it: knox's row, the token's SHA-512 digest and first characters.

    The token itself is stored nowhere: it is shown once, by ``manage.py
    tokens create <user>`` or the admin's add form (``hub.tokens.issue``), and
    people name it by its first characters (``token_key``), which find it
    but cannot stand in for it. Migration 0025 moved DRF's plaintext tokens here.
    """

    class Meta:
        proxy = True
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.token_key}…"


#: The prev_hash of entry 1: a chain starts from a fixed, published value.
AUDIT_GENESIS = "sha256:" + "0" * 64


class AuditEntry(models.Model):
    """One link of the hash chain over decisions, expiries and changes to policies and agents.

    ``content`` is the RFC 8785 canonical JSON text of ``{seq, kind, subject,
    at, data}`` exactly as it was hashed, and ``hash`` is ``sha256:`` + the
    hex SHA-256 of ``prev_hash`` (ASCII) followed by ``content`` (UTF-8),
    ``prev_hash`` being the previous entry's ``hash`` (``AUDIT_GENESIS`` for
    entry 1). Text, not JSON: PostgreSQL's jsonb would reorder the keys, and
    an export's reader then needs nothing but stdlib ``json`` and ``hashlib``.

    The database keeps the chain append-only (migration 0011): no UPDATE; an
    INSERT must take the next seq and the previous hash; on PostgreSQL no
    DELETE; on SQLite only the oldest entry may go (the test runner's flush
    deletes oldest first), which ``trail.verify`` reports as entry 1 missing.
    The subject references are not foreign-key constraints, so an entry
    outlives a decision someone deletes by hand, and says so. Only
    ``trail.record`` writes entries.
    """

    seq = models.PositiveBigIntegerField(unique=True)
    kind = models.CharField(max_length=40)
    # What the entry is about, as text that survives the row: "decision:12", "agent:3".
    subject = models.CharField(max_length=100)
    decision = models.ForeignKey(Decision, null=True, blank=True, on_delete=models.DO_NOTHING,
                                 db_constraint=False, related_name="audit_entries")
    interrupt = models.ForeignKey(Interrupt, null=True, blank=True, on_delete=models.DO_NOTHING,
                                  db_constraint=False, related_name="audit_entries")
    content = models.TextField()
    prev_hash = models.CharField(max_length=71)
    hash = models.CharField(max_length=71)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["seq"]
        verbose_name_plural = "audit entries"
        constraints = [models.CheckConstraint(condition=Q(seq__gte=1), name="audit_seq_positive")]
        indexes = [models.Index(fields=["subject", "seq"], name="audit_subject_seq")]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} {self.subject}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not self._state.adding:
            raise ValueError("Audit entries are append-only: an entry is never changed.")
        super().save(*args, **kwargs)


class AuditCheckpoint(models.Model):
    """The last verification of the trail: the chain was intact through ``seq``, whose hash was ``hash``.

    One row (pk 1), rewritten by ``trail.verify`` and extended by the audit
    page, so the page shows how far the trail is verified without
    recomputing it whole, and a trail rewritten below ``seq`` shows (its
    hash at ``seq`` changes).
    """

    seq = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=71, default=AUDIT_GENESIS)
    verified_at = models.DateTimeField()
    # Whether that verification also cross-checked every decision and expiry
    # against its entry (``manage.py audit verify``), or only the links.
    complete = models.BooleanField(default=False)
    # What that verification found wrong (the first broken entry first), or "".
    problem = models.TextField(blank=True)


class NotifyEvent(models.TextChoices):
    """What a webhook or an email can tell people about (``hub.notify``)."""

    RAISED = "raised", "Raised"
    DECIDED = "decided", "Decided"
    EXPIRED = "expired", "Expired"
    ESCALATED = "escalated", "Escalated"
    REFUSED = "refused", "Answer refused"


def every_notify_event() -> list[str]:
    return list(NotifyEvent.values)


class Webhook(models.Model):
    """Where Countersign POSTs a signed JSON body when something happens to a team's requests.

    Scope: with a ``group``, the interrupts whose governing policy names that
    group or that escalated to it; with a ``policy``, that policy's
    interrupts; with both, either; with neither, every interrupt. ``events``
    is the subset of ``NotifyEvent`` it is sent. The URL is checked when
    Countersign connects, as agents' are (``hub.egress``), and no redirect
    is ever followed.
    """

    Event = NotifyEvent

    name = models.CharField(max_length=100, unique=True)
    url = models.URLField(
        max_length=2000,
        validators=[URLValidator(schemes=["http", "https"], message="Give an http:// or https:// URL.",
                                 code="invalid_scheme")],
        help_text="Where each event is POSTed (http or https).",
    )
    # The key of every Countersign-Signature on this webhook's deliveries, as agents have theirs.
    secret = models.CharField(max_length=100, default=new_signing_secret, editable=False)
    group = models.ForeignKey(Group, null=True, blank=True, on_delete=models.CASCADE, related_name="+",
                              help_text="Only interrupts whose policy names this team, or that escalated to it.")
    policy = models.ForeignKey("Policy", null=True, blank=True, on_delete=models.CASCADE, related_name="webhooks",
                               help_text="Only this policy's interrupts.")
    events = models.JSONField(default=every_notify_event, help_text="Which events it is sent.")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self):
        from django.core.exceptions import ValidationError

        if not isinstance(self.events, list) or not self.events or \
                not set(self.events) <= set(NotifyEvent.values) or len(set(self.events)) != len(self.events):
            raise ValidationError({"events": f"Name one or more of: {', '.join(NotifyEvent.values)}."})

    def rotate_secret(self) -> str:
        """Replace the signing secret and return the new one, the only time it is shown."""
        self.secret = new_signing_secret()
        self.save(update_fields=["secret"])
        return self.secret


class DeliveryStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    SENDING = "sending", "Sending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class Delivery(models.Model):
    """One event for one webhook: the exact body signed, and how sending it went.

    Queued in the transaction of the change it reports (``hub.notify``), at
    most once per (webhook, event key). Sent by one process at a time
    (``claimed_by`` under a lease); retried with backoff until delivered or
    out of attempts. A re-send queues the same body again.
    """

    Status = DeliveryStatus

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=16, choices=NotifyEvent.choices)
    # What happened, once: "raised:interrupt:12". Sent as Countersign-Delivery, so a receiver can drop a repeat.
    key = models.CharField(max_length=200)
    interrupt = models.ForeignKey("Interrupt", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The JSON text exactly as signed (ASCII: every character escaped), so a re-send is byte for byte the same.
    body = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    claimed_by = models.CharField(max_length=100, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    response_status = models.PositiveIntegerField(null=True, blank=True)
    response_excerpt = models.TextField(blank=True)
    last_error = models.TextField(blank=True)
    # A re-send someone asked for, told on the next try's record; its attempts count from resent_from.
    resent_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    resent_from = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["webhook", "key"], name="delivery_once_per_webhook_event"),
            models.CheckConstraint(condition=Q(status__in=DeliveryStatus.values), name="delivery_status_valid"),
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="delivery_due")]

    def __str__(self) -> str:
        return f"{self.webhook} {self.key}"


class DeliveryAttempt(models.Model):
    """One try of a delivery: what the receiver answered, or why nothing arrived; a re-send says who asked."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="tries")
    number = models.PositiveIntegerField()
    at = models.DateTimeField()
    response_status = models.PositiveIntegerField(null=True, blank=True)
    response_excerpt = models.TextField(blank=True)
    error = models.TextField(blank=True)
    resent_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")

    class Meta:
        ordering = ["delivery", "pk"]


class EmailChoice(models.TextChoices):
    IMMEDIATE = "immediate", "Each request as it arrives"
    DIGEST = "digest", "A digest"
    NONE = "none", "No email"


class NotificationPreference(models.Model):
    """How a person wants to hear of requests by email (no row: immediate)."""

    Email = EmailChoice

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="notification_preference")
    email = models.CharField(max_length=16, choices=EmailChoice.choices, default=EmailChoice.IMMEDIATE)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(email__in=EmailChoice.values),
                                              name="notification_email_valid")]


class EmailNotice(models.Model):
    """One event one person is to be emailed about: at most once per (user, event key).

    Immediate notices go one email each; a person's digest notices share a
    ``due_at`` (the end of the digest period they arrived in) and go in one
    email. Sent under a lease; retried with backoff, then ``failed``.
    """

    Status = DeliveryStatus

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    event = models.CharField(max_length=16, choices=NotifyEvent.choices)
    interrupt = models.ForeignKey("Interrupt", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The plain-text lines this notice contributes, written when queued (agent text bounded, never HTML).
    subject = models.CharField(max_length=200)
    text = models.TextField()
    digest = models.BooleanField(default=False)
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.QUEUED)
    due_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    claimed_by = models.CharField(max_length=100, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="email_once_per_user_event"),
            models.CheckConstraint(condition=Q(status__in=DeliveryStatus.values), name="email_status_valid"),
        ]
        indexes = [models.Index(fields=["status", "due_at"], name="email_due")]
