"""The reads that pages and the API share: the inbox, batches, threads, the audit trail.

Every function here issues a fixed number of queries whatever the page size:
pages stay fast with 100,000 pending interrupts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import (
    BooleanField,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    Max,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Window,
)
from django.db.models.functions import Coalesce, RowNumber
from django.utils import timezone

from ..conf import (
    AGENT_RECENT_RESUMES,
    AGENT_REFUSAL_CHARS,
    INBOX_COUNTED,
    MAX_BULK_DECISIONS,
    MAX_SUGGESTION_ROWS,
    SIMULATION_DAYS,
    settings,
)
from ..models import Agent, AuditEntry, Decision, Event, Grant, Interrupt, Policy, Run, Thread, under
from ..protocol import capabilities, dialects, signing

# raw_subagent_run_id and read_subagent_event are history's too: one attribution for every page.
from ..protocol.subagents import SUBAGENT_EVENTS, attribute, raw_subagent_run_id, read_subagent_event  # noqa: F401
from ..rules import eligibility, words
from ..rules.settling import may_have_acted, settleable_by

SORTS = {
    "oldest": ("created_at", "pk"),
    "newest": ("-created_at", "-pk"),
    "expiry": ("expires_at", "created_at", "pk"),
}
AGES = {"1h": timedelta(hours=1), "1d": timedelta(days=1), "7d": timedelta(days=7)}
EXPIRING_SOON = timedelta(hours=1)


def pending_count() -> int:
    return Interrupt.objects.filter(status=Interrupt.Status.PENDING).count()


def policies_in_force(request=None) -> list[Policy]:
    """Every policy, most specific first, as this process holds them (``eligibility.held_policies``: one
    query while none changed), taken once per request.

    The page, its cards and the header's badge judge by the same list. Their agents are not read with them:
    a page that names them reads ``policies_overview``.
    """
    if request is None:
        return eligibility.held_policies().policies
    found = getattr(request, "_countersign_policies", None)
    if found is None:
        found = request._countersign_policies = eligibility.held_policies().policies
    return found


@dataclass(frozen=True)
class Counted:
    """How many rows a query found, reading at most ``bound + 1`` of them (``counted``)."""

    n: int
    more: bool = False  # there were more than ``n``

    def __str__(self) -> str:
        """As the badge and the inbox say it: "12", or "1000+"."""
        return f"{self.n}+" if self.more else str(self.n)

    def __bool__(self) -> bool:
        return self.n > 0

    def at_most(self, bound: int) -> Counted:
        return self if self.n <= bound else Counted(bound, True)


def counted(queryset, bound: int) -> Counted:
    """How many rows ``queryset`` has, up to ``bound``: one query that reads at most ``bound + 1`` of them."""
    found = queryset.order_by()[:bound + 1].count()
    return Counted(min(found, bound), found > bound)


def waiting(user, in_force: list[Policy] | None = None) -> Counted:
    """How many pending interrupts wait for ``user`` (they may decide them and have not yet), up to
    ``INBOX_COUNTED``: the header's badge, and the count each open inbox is sent when the inbox changes."""
    return counted(inbox(InboxFilters(), user=user, in_force=in_force), INBOX_COUNTED)


@dataclass(frozen=True)
class InboxFilters:
    agent: str = ""
    reason: str = ""
    thread: str = ""
    q: str = ""
    age: str = ""  # waiting longer than: 1h, 1d, 7d
    expiring: bool = False
    sort: str = "oldest"
    # "mine": what the reader may decide and has not yet (the default); "all": every pending interrupt.
    scope: str = "mine"

    @property
    def unfiltered(self) -> bool:
        """Whether every interrupt of the scope matches (the order aside)."""
        return not (self.agent or self.reason or self.thread or self.q or self.age or self.expiring)

    @classmethod
    def from_query(cls, params) -> InboxFilters:
        sort = params.get("sort", "oldest")
        age = params.get("age", "")
        return cls(
            agent=params.get("agent", "")[:64],
            reason=params.get("reason", "")[:200],
            thread=params.get("thread", "")[:200],
            q=params.get("q", "").strip()[:200],
            age=age if age in AGES else "",
            expiring=params.get("expiring") in ("1", "on", "true"),
            sort=sort if sort in SORTS else "oldest",
            scope="all" if params.get("scope") == "all" else "mine",
        )


def inbox(filters: InboxFilters, now: datetime | None = None, user=None, in_force: list[Policy] | None = None):
    """Pending interrupts matching ``filters``, in the chosen order (a queryset to paginate; ``inbox_batches``
    loads a page of it).

    With the "mine" scope and a ``user``, only those waiting for that user.
    """
    now = now or timezone.now()
    queryset = Interrupt.objects.filter(status=Interrupt.Status.PENDING)
    if filters.scope == "mine" and user is not None:
        queryset = queryset.filter(eligibility.decidable_by(user, in_force))
    if filters.agent:
        queryset = queryset.filter(run_agent__name=filters.agent)
    if filters.reason:
        queryset = queryset.filter(reason=filters.reason)
    if filters.thread:
        queryset = queryset.filter(run__thread__thread_id=filters.thread)
    if filters.age:
        queryset = queryset.filter(created_at__lte=now - AGES[filters.age])
    if filters.expiring:
        queryset = queryset.filter(expires_at__isnull=False, expires_at__lte=now + EXPIRING_SOON)
    if filters.q:
        queryset = queryset.filter(
            Q(message__icontains=filters.q) | Q(interrupt_id__icontains=filters.q) | Q(tool_name__icontains=filters.q)
            | Q(run__thread__title__icontains=filters.q) | Q(run__thread__thread_id__icontains=filters.q)
        )
    return queryset.order_by(*SORTS[filters.sort])


@dataclass(frozen=True)
class BulkTargets:
    """What one bulk decision acts on: the interrupts found (runs loaded), the ids not found, and how many
    matching a filter were left past ``MAX_BULK_DECISIONS``."""

    chosen: list[Interrupt]
    missing: list[int]
    more: int = 0


def bulk_targets(*, ids: list[int] | None = None, filters: InboxFilters | None = None, user=None,
                 in_force: list[Policy] | None = None) -> BulkTargets:
    """The interrupts a bulk decision names: ``ids`` in the order given (once each), or the first
    ``MAX_BULK_DECISIONS`` pending ones matching ``filters`` as ``user``'s inbox lists them.

    The API and the inbox's form both read their selection here, so "all matching
    this filter" means what the inbox shows, and the limit is the same on both.
    """
    if ids is not None:
        wanted = list(dict.fromkeys(ids))
        found = Interrupt.objects.select_related("run__agent").in_bulk(wanted)
        return BulkTargets([found[pk] for pk in wanted if pk in found], [pk for pk in wanted if pk not in found])
    matching = inbox(filters, user=user, in_force=in_force)
    pks = list(matching.values_list("pk", flat=True)[:MAX_BULK_DECISIONS + 1])
    more = max(matching.count() - MAX_BULK_DECISIONS, 0) if len(pks) > MAX_BULK_DECISIONS else 0
    found = Interrupt.objects.select_related("run__agent").in_bulk(pks[:MAX_BULK_DECISIONS])
    return BulkTargets([found[pk] for pk in pks[:MAX_BULK_DECISIONS] if pk in found], [], more)


def interrupts_by_pk(pks: list[int]) -> list[Interrupt]:
    """The interrupts ``pks`` name that exist, in that order, with their runs and agents."""
    found = Interrupt.objects.select_related("run__agent").in_bulk(pks)
    return [found[pk] for pk in dict.fromkeys(pks) if pk in found]


def agent_names():
    return Agent.objects.order_by("name").values_list("name", flat=True)


#: How many reasons the inbox's filter offers.
REASONS_LISTED = 50


def pending_reasons() -> list[str]:
    """The distinct reasons of pending interrupts, in order (at most ``REASONS_LISTED``; 1 query).

    Hops from one reason to the next along the (status, reason) index, one
    probe per reason: a DISTINCT read all 100,000 entries (~25 ms on PostgreSQL).
    """
    table, quote = Interrupt._meta.db_table, connection.ops.quote_name
    sql = (f"WITH RECURSIVE hops(reason, n) AS ("
           f" SELECT MIN(reason), 1 FROM {quote(table)} WHERE status = %s"
           f" UNION ALL SELECT (SELECT MIN(reason) FROM {quote(table)} WHERE status = %s AND reason > hops.reason),"
           f" n + 1 FROM hops WHERE hops.reason IS NOT NULL AND n < %s)"
           f" SELECT reason FROM hops WHERE reason IS NOT NULL")
    pending = Interrupt.Status.PENDING.value
    with connection.cursor() as cursor:
        cursor.execute(sql, [pending, pending, REASONS_LISTED])
        return [reason for (reason,) in cursor.fetchall()]


@dataclass
class Batch:
    """The interrupts one run raised, with how far the team has got."""

    run: Run
    pending: list[Interrupt] = field(default_factory=list)  # the ones on this page
    members: list[Interrupt] = field(default_factory=list)  # every interrupt of the run

    @property
    def decided(self) -> list[Interrupt]:
        # Expired counts: nobody can answer it any more, and the resume cancels it (C20).
        return [i for i in self.members if i.status in (Interrupt.Status.RESOLVED, Interrupt.Status.CANCELLED,
                                                        Interrupt.Status.EXPIRED)]

    @property
    def total(self) -> int:
        return len(self.members)


def page_keys(queryset, start: int, size: int) -> list[tuple[int, int]]:
    """The (pk, run_id) of ``size`` rows of ``queryset`` (``inbox``) from ``start``: a page, read along the index.

    The page's keys first, then the rows of its runs (``inbox_batches``): page
    500 skips 12,475 entries of the inbox index instead of 12,475 rows joined
    to their runs, threads and agents.
    """
    return list(queryset.values_list("pk", "run_id")[start:start + size])


def card_interrupts():
    """Interrupts as a card shows them: with their run, thread and agent, without the conversation.

    Read with every card, a long conversation was decoded whole for each batch on every inbox page.
    """
    return Interrupt.objects.select_related("run__thread", "run__agent").defer(
        *under("run", Run.CONVERSATION), *under("run__thread", Thread.CONVERSATION))


def _members(**filters) -> list[Interrupt]:
    """The interrupts ``filters`` select, as cards show them, with who holds them, live decisions and subagents."""
    live = Decision.objects.filter(superseded_at__isnull=True).select_related("user")
    return with_subagents(list(card_interrupts().filter(**filters).select_related("claimed_by", "escalated_to")
                               .prefetch_related(_live_decisions(live)).order_by("pk")))


def inbox_batches(page: list[tuple[int, int]]) -> list[Batch]:
    """A page of ``inbox`` (``page_keys``) grouped by the run that raised it, with members' live decisions and
    subagents (3 queries)."""
    runs_in_order = list(dict.fromkeys(run_id for _, run_id in page))
    grouped: dict[int, Batch] = {}
    found: dict[int, Interrupt] = {}
    for member in _members(run_id__in=runs_in_order):
        grouped.setdefault(member.run_id, Batch(run=member.run)).members.append(member)
        found[member.pk] = member
    for pk, run_id in page:
        if pk in found:
            grouped[run_id].pending.append(found[pk])
    return [grouped[run_id] for run_id in runs_in_order if run_id in grouped]


def batch(run: Run) -> Batch:
    """One run's whole batch: its pending interrupts and every member's live decision."""
    return _batch(run, _members(run=run))


def batch_of(interrupt_pk: int) -> tuple[Interrupt, Batch] | None:
    """The interrupt ``interrupt_pk`` and its whole batch, read together (its run found by a subquery);
    None if there is no such interrupt."""
    members = _members(run_id=Subquery(Interrupt.objects.filter(pk=interrupt_pk).values("run_id")[:1]))
    found = next((member for member in members if member.pk == interrupt_pk), None)
    return None if found is None else (found, _batch(found.run, members))


def _batch(run: Run, members: list[Interrupt]) -> Batch:
    return Batch(run=run, pending=[m for m in members if m.status == Interrupt.Status.PENDING], members=members)


def _live_decisions(queryset):
    return Prefetch("decisions", queryset=queryset, to_attr="live_decisions")


def resumed_by(run_pks, *, whole: bool = True) -> dict[int, Run]:
    """The resume run of each interrupted run that has one; ``whole=False`` leaves out what it sent and got
    (its input carries the conversation), which a card does not show."""
    # Oldest first, so the latest resume wins (a refused answer sent again);
    # once the latest was reopened, none stands for the batch (Run.resumed_by).
    resumes = Run.objects.filter(parent_id__in=list(run_pks), resume_key__isnull=False).select_related("settled_by")
    latest = {r.parent_id: r for r in (resumes if whole else resumes.defer(*Run.CONVERSATION)).order_by("pk")}
    return {parent: run for parent, run in latest.items() if run.settlement != Run.Settlement.REOPENED}


def refused_answers(limit: int = 50, thread=None, user=None) -> list[Run]:
    """Resumed runs that failed and that nobody has dealt with yet (``hub.refused``), latest first.

    With ``user``: only those they may settle (``settling.settleable_by``;
    the agent's error text is not every colleague's to read). Each carries
    ``acted``: whether the agent may have acted on the answers
    (``rules.settling.may_have_acted``), when they are not offered to be sent again.
    """
    found = Run.objects.filter(status=Run.Status.FAILED, resume_key__isnull=False, settlement="")
    if thread is not None:
        found = found.filter(thread=thread)
    found = _found(found.order_by("-finished_at", "-pk")[:limit])
    if not found:
        return []
    rows = list(found.select_related("thread", "agent", "parent").annotate(
        acted=ExpressionWrapper(may_have_acted(), output_field=BooleanField()),
    ).order_by("-finished_at", "-pk"))
    return rows if user is None else settleable_by(user, rows)


def awaiting_agent(limit: int = 50) -> list[Run]:
    """Runs queued again because their agent could not be reached, next try first."""
    found = _found(Run.objects.filter(status=Run.Status.QUEUED, attempts__gt=0).order_by("retry_at", "pk")[:limit])
    return list(found.select_related("thread", "agent").order_by("retry_at", "pk")) if found else []


def _found(runs) -> QuerySet | None:
    """The runs ``runs`` (a sliced, ordered queryset) finds, as a queryset of their pks, or None when none.

    For the lists a page shows that are nearly always empty (refused answers, runs awaiting their agent):
    their pks first, then their rows only when there are any. Building the query for
    whole Run rows with their relations is 1–3 ms of the ORM's Python even when it finds nothing.
    """
    pks = list(runs.values_list("pk", flat=True))
    return Run.objects.filter(pk__in=pks) if pks else None


def thread_rows():
    """Threads with their agent (a page finds its thread here by thread_id)."""
    return Thread.objects.select_related("agent")


def threads(agent: str = "", q: str = ""):
    """Threads, busiest first, with their pending count and latest run's status."""
    latest = Run.objects.filter(thread=OuterRef("pk")).order_by("-created_at", "-pk")
    queryset = Thread.objects.select_related("agent").annotate(
        pending=Count("runs__interrupts", filter=Q(runs__interrupts__status=Interrupt.Status.PENDING)),
        latest_status=Subquery(latest.values("status")[:1]),
    )
    if agent:
        queryset = queryset.filter(agent__name=agent)
    if q:
        queryset = queryset.filter(Q(title__icontains=q) | Q(thread_id__icontains=q))
    return queryset.order_by("-updated_at")


def thread_pending(thread: Thread) -> list[str]:
    """The interrupt ids still pending on the thread."""
    return list(Interrupt.objects.filter(run__thread=thread, status=Interrupt.Status.PENDING)
                .values_list("interrupt_id", flat=True))


def thread_has_pending(thread: Thread) -> bool:
    return Interrupt.objects.filter(run__thread=thread, status=Interrupt.Status.PENDING).exists()


def thread_runs(thread: Thread) -> list[Run]:
    return list(thread.runs.order_by("created_at", "pk"))


def event_rows(thread: Thread, after: int = 0, limit: int = 200) -> list[Event]:
    """The thread's events after ``after`` as rows, each with its run (the API's page of the log)."""
    return list(Event.objects.filter(thread=thread, seq__gt=after).select_related("run").order_by("seq")[:limit])


def thread_events(thread: Thread, after: int = 0, limit: int | None = None) -> list[tuple]:
    """The thread's log after ``after``, as (seq, type, payload, run_id, from_agent), for history.fold."""
    queryset = Event.objects.filter(thread=thread, seq__gt=after).order_by("seq").values_list(
        "seq", "type", "payload", "run__run_id", "from_agent"
    )
    return list(queryset[:limit] if limit else queryset)


def run_facts(thread: Thread) -> tuple[dict[str, str], dict[str, dict]]:
    """What the thread's history shows beside its events, in one query: (``said``, ``raised``).

    ``said``: for each run that carried a new user message, its text (part
    of the input, not of the agent's stream). ``raised``: for each run that
    paused, the interrupt outcome as Countersign read it, which for an agent
    of another dialect (LangGraph's on_interrupt) is not in its RUN_FINISHED.
    """
    said, raised = {}, {}
    for run_id, run_input, status, outcome in Run.objects.filter(thread=thread).values_list(
            "run_id", "input", "status", "outcome"):
        messages = (run_input or {}).get("messages") or []
        last = messages[-1] if messages else None
        if last and last.get("role") == "user" and not run_input.get("resume") and isinstance(last.get("content"), str):
            said[run_id] = last["content"]
        if status == Run.Status.INTERRUPTED and isinstance(outcome, dict):
            raised[run_id] = outcome
    return said, raised


def _resumed_by(run_pk):
    """The runId of the run that sent back the decisions of run ``run_pk`` (an OuterRef), or NULL."""
    # The latest resume, unless it was reopened (Run.resumed_by): none reopened after it, and not itself.
    reopened_later = Run.objects.filter(parent=OuterRef("parent"), resume_key__isnull=False,
                                        settlement=Run.Settlement.REOPENED, pk__gte=OuterRef("pk"))
    return Subquery(Run.objects.filter(parent=run_pk, resume_key__isnull=False).exclude(Exists(reopened_later))
                    .order_by("-pk").values("run_id")[:1])


def runs():
    """Runs with their thread, agent and parent, and ``resumed_by_run_id`` (``Run.resumed_by``'s runId).

    Without the thread's conversation and the parent's input and outcome: a run
    is shown with their names only, and a long conversation was read and decoded
    whole on every read of every run of its thread.
    """
    return (Run.objects.select_related("thread", "agent", "parent", "settled_by")
            .defer(*under("thread", Thread.CONVERSATION), *under("parent", Run.CONVERSATION))
            .annotate(resumed_by_run_id=_resumed_by(OuterRef("pk"))))


def interrupts():
    """Interrupts with their run, thread and agent, and ``standing``: how many standing decisions they have."""
    standing = (Decision.objects.filter(interrupt=OuterRef("pk"), superseded_at__isnull=True).order_by()
                .values("interrupt").annotate(n=Count("pk")).values("n"))
    return (Interrupt.objects.select_related("run__thread", "run__agent", "claimed_by", "escalated_to")
            .annotate(standing=Coalesce(Subquery(standing), 0)).order_by("created_at", "pk"))


def subagent_run_id(interrupt: Interrupt) -> str | None:
    """Which subagent's run raised ``interrupt``, as its agent said (AG-UI ``subagentRunId``); None for the root.

    Read from the interrupt as sent (``raw``), whole: agent text, for pages
    to escape and cut, never to link. The wire model lets only a string
    through; anything else stored here is not an id.
    """
    return raw_subagent_run_id(interrupt.raw)


@dataclass(frozen=True)
class Subagent:
    """The subagent that asked an interrupt (AG-UI 1.0 subagents): its run id, and its name when announced."""

    run_id: str
    name: str | None = None


def subagents(interrupts) -> dict[int, Subagent]:
    """Which subagent asked each interrupt raised inside one, by interrupt pk (one query, whatever the page).

    Attributed by the interrupt's own ``subagentRunId`` (C35: meaningful
    without any lifecycle event), else by a ``SUBAGENT_FINISHED`` of its run
    whose ``suspended`` outcome lists its id (C36); named by the run's
    ``SUBAGENT_STARTED`` for that subagent run. Agent text: pages escape and
    cut it, never link it.
    """
    interrupts = list(interrupts)
    names: dict[tuple[int, str], str] = {}
    suspended: dict[tuple[int, str], str] = {}
    for run_pk, kind, payload in Event.objects.filter(
        run_id__in={i.run_id for i in interrupts}, type__in=SUBAGENT_EVENTS
    ).order_by("seq").values_list("run_id", "type", "payload"):
        read_subagent_event(run_pk, kind, payload, names, suspended)
    found = {}
    for interrupt in interrupts:
        if (who := attribute(interrupt.run_id, interrupt.interrupt_id, interrupt.raw, names, suspended)) is not None:
            found[interrupt.pk] = Subagent(*who)
    return found


def with_subagents(interrupts):
    """``interrupts``, each with ``subagent``: the ``Subagent`` that asked it, or None (the agent itself)."""
    found = subagents(interrupts)
    for interrupt in interrupts:
        interrupt.subagent = found.get(interrupt.pk)
    return interrupts


def interrupt_details():
    """``interrupts`` with every decision (and its user) and ``resumed_by_run_id``: the run that sent them back."""
    return interrupts().prefetch_related(Prefetch("decisions", Decision.objects.select_related("user"))
                                         ).annotate(resumed_by_run_id=_resumed_by(OuterRef("run_id")))


def agents():
    return Agent.objects.all()


def policies_listed():
    """Policies with their agent, groups and users (3 queries whatever their number)."""
    return Policy.objects.select_related("agent", "backup_group", "auto_approve_by").prefetch_related("groups", "users")


def agents_overview() -> list[Agent]:
    """Agents with their last run, pending count and latest notice (``latest_notice``), in two queries.

    Each also says how it pauses (``pauses``), how its latest resumes went
    (``resumes``, a ``ResumeRecord`` or None) and what it declares of
    ``humanInTheLoop`` (``human_in_the_loop``, ``protocol.capabilities``).
    """
    listed = list(Agent.objects.annotate(
        pending=Count("runs__interrupts", filter=Q(runs__interrupts__status=Interrupt.Status.PENDING)),
        last_run=Max("runs__created_at"),
        **latest_notice(OuterRef("pk")),
    ).order_by("name"))
    resumes = recent_resumes()
    for agent in listed:
        agent.pauses = dialects.pause_words(agent.paused_as, agent.dialect)
        agent.resumes = resumes.get(agent.pk)
        agent.human_in_the_loop = capabilities.human_in_the_loop(agent.capabilities)
    return listed


@dataclass(frozen=True)
class ResumeRecord:
    """How an agent's latest resumes went: how many it accepted and refused, and why the latest refusal."""

    accepted: int
    refused: int
    reason: str

    def words(self) -> str:
        count = self.accepted + self.refused
        said = f"Last {count} resume{'s' if count != 1 else ''}: {self.accepted} accepted, {self.refused} refused"
        return f"{said}: {self.reason}" if self.refused and self.reason else said


def recent_resumes(limit: int = AGENT_RECENT_RESUMES) -> dict[int, ResumeRecord]:
    """Each agent's last ``limit`` ended resumes (agent pk -> ``ResumeRecord``), in one query.

    A resume is accepted when its run did not fail (it succeeded, paused
    again or was stopped by its agent), refused when the agent failed it.
    """
    ended = Run.objects.filter(resume_key__isnull=False, status__in=Run.FINAL_STATUSES).annotate(
        rank=Window(RowNumber(), partition_by=[F("agent_id")], order_by=[F("created_at").desc(), F("pk").desc()]))
    rows = ended.filter(rank__lte=limit).order_by("agent_id", "rank").values_list(
        "agent_id", "status", "error_code", "error_message")
    found: dict[int, list] = {}
    for agent_pk, status, code, message in rows:
        found.setdefault(agent_pk, []).append((status, code, message))
    records = {}
    for agent_pk, runs in found.items():
        refused = [(code, message) for status, code, message in runs if status == Run.Status.FAILED]
        reason = ""
        if refused:
            code, message = refused[0]  # the latest
            reason = (message or code or "no reason given").strip()
            if len(reason) > AGENT_REFUSAL_CHARS:
                reason = reason[:AGENT_REFUSAL_CHARS - 1] + "…"
        records[agent_pk] = ResumeRecord(len(runs) - len(refused), len(refused), reason)
    return records


def latest_notice(agent) -> dict:
    """Annotations of an agent (``agent``: its pk, an OuterRef): its latest run with a notice, and when it ended.

    ``notice``: what Countersign noticed about that run (``Run.notice``, e.g.
    LangGraph's on_interrupt with no outcome); ``notice_run_id``,
    ``notice_at``: which run, when. NULL when no run of it has one.
    """
    noticed = Run.objects.filter(agent=agent).exclude(notice="").order_by("-created_at", "-pk")
    return {"notice": Subquery(noticed.values("notice")[:1]),
            "notice_run_id": Subquery(noticed.values("run_id")[:1]),
            "notice_at": Subquery(noticed.values("finished_at")[:1])}


def policies_overview(in_force: list[Policy] | None = None) -> list:
    """Every policy with its agent, groups and users, by agent (every agent first); no query given
    ``in_force`` (``eligibility.in_force``'s), 3 otherwise."""
    found = eligibility.in_force() if in_force is None else in_force
    return sorted(found, key=lambda p: (p.agent.name if p.agent else "", p.specificity), reverse=False)


# --- the audit trail -----------------------------------------------------------


@dataclass(frozen=True)
class AuditFilters:
    user: str = ""
    agent: str = ""
    thread: str = ""
    outcome: str = ""  # resolved, cancelled, expired
    since: str = ""  # YYYY-MM-DD
    until: str = ""

    @classmethod
    def from_query(cls, params) -> AuditFilters:
        outcome = params.get("outcome", "")
        return cls(
            user=params.get("user", "")[:150], agent=params.get("agent", "")[:64],
            thread=params.get("thread", "")[:200],
            outcome=outcome if outcome in ("resolved", "cancelled", "expired") else "",
            since=_date(params.get("since", "")), until=_date(params.get("until", "")),
        )


def _date(value: str) -> str:
    try:
        return datetime.strptime(value, "%Y-%m-%d").strftime("%Y-%m-%d")
    except ValueError:
        return ""


@dataclass
class AuditRow:
    interrupt: Interrupt
    decisions: list[Decision]
    resume: Run | None
    results: list[dict]
    # (seq, kind, hash, at, data) of each trail entry about this interrupt: its decisions,
    # supersessions, expiry, claims and escalation.
    trail: list[tuple] = field(default_factory=list)

    @property
    def attention(self) -> list[tuple[datetime, str]]:
        """Claims taken, released or lapsed, escalation and undone decisions, as the trail records them: (at, text)."""
        said = []
        for _seq, kind, _hash, at, data in self.trail:
            who = (data.get("user") or {}).get("username")
            # Lazy (a missing key must not fail other kinds); defaults bind this row's values.
            text = {
                "claim.taken": lambda who=who, data=data: (
                    f"claimed by {who}"
                    + (f" (taken over from {data['takenFrom']})" if data.get("takenFrom") else "")),
                "claim.released": lambda who=who, data=data: f"claim of {data.get('holder')} released by {who}",
                "claim.lapsed": lambda data=data: f"claim of {data.get('holder')} lapsed (idle)",
                "interrupt.escalated": lambda data=data: (
                    f"missed its {data.get('targetMinutes')} min target: escalated to {data.get('group')}"),
                "decision.undone": lambda who=who, data=data: (
                    f"{who} undid their decision ({data.get('outcome')})"
                    + (f"; its resume {data['withdrawnRunId']} was withdrawn before it was sent"
                       if data.get("withdrawnRunId") else "")),
                "decision.unacknowledged": lambda who=who: (
                    f"{who}'s decision was taken back: the server stopped "
                    "before telling them it was recorded, so it was not sent"),
            }.get(kind)
            if text is not None:
                said.append((at, text()))
        return said

    @property
    def live(self) -> list[Decision]:
        """The decisions that stood when the interrupt closed: its approvers, or the one who ended it."""
        return [d for d in self.decisions if d.superseded_at is None]

    @property
    def decision(self) -> Decision | None:
        """The answer sent: the last standing decision (under a quorum they all carry the same answer)."""
        live = self.live
        return live[-1] if live else None

    @property
    def outcome(self) -> str:
        """What became of the request, in words: "Approved", "Approved with edits", "Rejected", "Answered",
        "Dismissed", "Expired" or "Closed" (the status and payload say it to a machine; this says it to a person)."""
        i, d = self.interrupt, self.decision
        if i.status == Interrupt.Status.EXPIRED:
            return "Expired"
        if d is None:  # closed without a decision: the run was stopped, or the batch closed; nobody dismissed it
            return "Closed" if i.status == Interrupt.Status.CANCELLED else i.get_status_display()
        # The decision's words are the ones the inbox, the thread page and a refusal say.
        return words.outcome_words(d)

    @property
    def comment(self) -> str:
        """The comment sent with the answer (under a quorum, the last approver's)."""
        return self.decision.comment if self.decision else ""

    @property
    def attestation(self) -> dict:
        """What Countersign told the agent about this answer (``metadata.countersign`` of its resume entry)."""
        for entry in (self.resume.input.get("resume") or []) if self.resume else []:
            if entry.get("interruptId") == self.interrupt.interrupt_id:
                return (entry.get("metadata") or {}).get("countersign") or {}
        return {}

    @property
    def accepted(self) -> str:
        """Whether the resumed run took the answer: "accepted", "refused", "cancelled", "pending", or "" (never sent).

        A resumed run the agent ended as cancelled (RUN_FINISHED outcome
        ``cancelled``) stopped; it did not refuse the answer (that is a
        RUN_ERROR, which fails the run).
        """
        if self.resume is None:
            return ""
        if self.resume.status in (Run.Status.SUCCEEDED, Run.Status.INTERRUPTED):
            return "accepted"
        if self.resume.status == Run.Status.FAILED:
            return "refused"
        if self.resume.status == Run.Status.CANCELLED:
            return "cancelled"
        return "pending"

    def as_dict(self) -> dict:
        i, d = self.interrupt, self.decision
        return {
            "thread": i.run.thread.thread_id,
            "agent": i.run.agent.name,
            "interruptedRun": i.run.run_id,
            "interruptId": i.interrupt_id,
            "subagentRunId": subagent_run_id(i),
            "reason": i.reason,
            "message": i.message,
            "toolCallId": i.tool_call_id or None,
            "toolName": i.tool_name or None,
            "proposedArgs": i.proposed_args,
            "status": i.status,
            "closedReason": i.closed_reason or None,
            "decidedBy": d.user.get_username() if d else None,
            "approvers": [{"username": a.user.get_username(), "action": a.action or None,
                           "at": a.created_at.isoformat(), "comment": a.comment} for a in self.live],
            "policy": (d.policy or None) if d else None,
            "requiredApprovals": d.required_approvals if d else None,
            "fingerprint": self.attestation.get("fingerprint"),
            "accepted": self.accepted or None,
            "resumedRunError": (self.resume.error_code or None) if self.resume else None,
            "decidedAt": d.created_at.isoformat() if d else None,
            "payload": d.payload if d else None,
            "editedArgs": d.edited_args if d else None,
            "revisions": len(self.decisions) - 1 if self.decisions else 0,
            "resumedRun": self.resume.run_id if self.resume else None,
            "resumedRunStatus": self.resume.status if self.resume else None,
            "results": [r.get("content") for r in self.results],
            "trail": [{"seq": seq, "kind": kind, "hash": entry} for seq, kind, entry, *_ in self.trail],
            "outcome": self.outcome,
            "comment": self.comment,
        }


def audit(filters: AuditFilters):
    """Decided (or expired) interrupts matching ``filters``, newest first (a queryset to paginate)."""
    queryset = Interrupt.objects.exclude(status=Interrupt.Status.PENDING).select_related(
        "run__agent", "run__thread"
    )
    if filters.agent:
        queryset = queryset.filter(run_agent__name=filters.agent)
    if filters.thread:
        queryset = queryset.filter(run__thread__thread_id=filters.thread)
    if filters.outcome:
        queryset = queryset.filter(status=filters.outcome)
    if filters.user:
        queryset = queryset.filter(decisions__user__username=filters.user).distinct()
    if filters.since:
        queryset = queryset.filter(closed_at__date__gte=filters.since)
    if filters.until:
        queryset = queryset.filter(closed_at__date__lte=filters.until)
    return queryset.order_by("-closed_at", "-pk")


def audit_rows(interrupts) -> list[AuditRow]:
    """For a page of interrupts: decisions, resume run, its TOOL_CALL_RESULTs, trail entries, subagents (6 queries)."""
    interrupts = with_subagents(list(interrupts))
    decisions: dict[int, list[Decision]] = {}
    for decision in Decision.objects.filter(interrupt__in=interrupts).select_related("user").order_by("pk"):
        decisions.setdefault(decision.interrupt_id, []).append(decision)
    resumes = resumed_by({i.run_id for i in interrupts})
    results: dict[tuple[int, str], list[dict]] = {}
    for run_pk, payload in Event.objects.filter(
        run__in=list(resumes.values()), type="TOOL_CALL_RESULT"
    ).values_list("run_id", "payload"):
        results.setdefault((run_pk, payload.get("toolCallId", "")), []).append(payload)
    entries: dict[int, list[tuple]] = {}
    for interrupt_pk, seq, kind, digest, at, content in AuditEntry.objects.filter(
        interrupt_id__in=[i.pk for i in interrupts]
    ).order_by("seq").values_list("interrupt_id", "seq", "kind", "hash", "created_at", "content"):
        entries.setdefault(interrupt_pk, []).append((seq, kind, digest, at, json.loads(content)["data"]))
    rows = []
    for interrupt in interrupts:
        resume = resumes.get(interrupt.run_id)
        found = results.get((resume.pk, interrupt.tool_call_id), []) if resume and interrupt.tool_call_id else []
        rows.append(AuditRow(interrupt, decisions.get(interrupt.pk, []), resume, found, entries.get(interrupt.pk, [])))
    return rows



def grants_listed(limit: int = 200):
    """Standing grants, newest first, with their author, agent and who revoked them (the grants page)."""
    return Grant.objects.select_related("author", "agent", "revoked_by").order_by("-created_at", "-pk")[:limit]


def grant_suggestions(pending) -> dict[int, int]:
    """Of ``pending`` tool calls, those the team approved identically (agent, tool, args) at least
    COUNTERSIGN_GRANT_SUGGEST_AFTER times in the last SIMULATION_DAYS days and never refused: pk → approvals.

    One query for a page of cards, whatever their number; nothing when the setting is 0.
    """
    wanted = [i for i in pending if i.tool_name]
    after = settings.COUNTERSIGN_GRANT_SUGGEST_AFTER
    if not wanted or after <= 0:
        return {}
    since = timezone.now() - timedelta(days=SIMULATION_DAYS)
    rows = (Decision.objects.filter(superseded_at__isnull=True, grant__isnull=True, by_policy=False,
                                    created_at__gte=since,
                                    interrupt__run__agent_id__in={i.run.agent_id for i in wanted},
                                    interrupt__tool_name__in={i.tool_name for i in wanted})
            .values_list("interrupt__run__agent_id", "interrupt__tool_name", "interrupt__proposed_args", "action")
            [:MAX_SUGGESTION_ROWS])
    approved: dict[tuple, int] = {}
    refused: set[tuple] = set()
    for agent_id, tool, args, action in rows:
        key = (agent_id, tool, signing.canonical(args))
        if action == "approve":
            approved[key] = approved.get(key, 0) + 1
        else:
            refused.add(key)
    found = {}
    for interrupt in wanted:
        key = (interrupt.run.agent_id, interrupt.tool_name, signing.canonical(interrupt.proposed_args))
        if approved.get(key, 0) >= after and key not in refused:
            found[interrupt.pk] = approved[key]
    return found
