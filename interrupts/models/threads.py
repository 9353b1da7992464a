"""Threads, their runs and every event an agent sent: the conversation as it happened."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from ..conf import MAX_TITLE_CHARS
from .agents import Agent
from .fields import ExactJSONField
from .transitions import RunQuerySet


def under(path: str, names: tuple[str, ...]) -> list[str]:
    """``names`` as fields of the model ``path`` leads to (``run``, ``run__thread``): what ``defer()`` takes."""
    return [f"{path}__{name}" for name in names]


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
    # The last event ``messages`` and ``state`` are folded up to. A streaming run writes its tokens
    # into them only now and then (each write is the whole conversation), so it may lag ``last_seq``:
    # ``hub.events.conversation_of`` folds the tokens after it.
    folded_seq = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    # What of it is the conversation (often the largest part): deferred wherever it is not shown or sent.
    CONVERSATION = ("messages", "state")

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
    Settlement = Settlement

    FINAL_STATUSES = (RunStatus.INTERRUPTED, RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)
    # The input sent and the terminal event received: as Thread.CONVERSATION, deferred where not needed.
    CONVERSATION = ("input", "outcome")

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

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "run_id"], name="run_id_unique_per_thread"),
            models.CheckConstraint(
                condition=Q(status__in=RunStatus.values), name="run_status_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["status", "created_at"], name="run_status_created"),
            # The API names a run by its runId alone (/api/runs/<runId>/): without this, a table scan.
            models.Index(fields=["run_id"], name="run_run_id"),
        ]

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
