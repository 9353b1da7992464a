"""The team's figures (the insight page, its export and GET /api/insight/): one function computes them all.

Three queries whatever the number of rows:

1. every interrupt that closed in the period, with its agent, reason,
   policy target and the standing decision that closed it (who, what),
   newest first and at most ``INSIGHT_MAX_ROWS`` of them;
2. the interrupts pending now, grouped by agent and reason, with how many
   are past their target and escalated (conditional counts);
3. the answers agents refused in the period (failed resumes), grouped.

Percentiles are computed here, in Python, from the exact durations read in
query 1, so SQLite and PostgreSQL give the same figures to the
microsecond: SQLite has no percentile function, and PostgreSQL's
``percentile_cont`` interpolates. The method is the nearest rank: the p-th
percentile of n sorted durations is the one at rank ⌈p·n/100⌉ (1-based),
always a time someone actually took, never a blend of two.

Time to decision is from when the interrupt was raised to ``closed_at``, the
moment the decision that closed it was taken (under a quorum, the last
approval): the same measure as Prometheus's
``countersign_time_to_decision_seconds``, so the two never disagree. The
reviewer it is counted for is whoever took that closing decision. An
interrupt reopened (a refused answer) and decided again is measured from
when it was raised.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.db.models import (
    Count,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
    Value,
)
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from ..conf import ACTIONS, INSIGHT_MAX_ROWS, settings
from ..models import Decision, Interrupt, Run

PERIODS = {"day": timedelta(days=1), "week": timedelta(days=7), "month": timedelta(days=30)}
DEFAULT_PERIOD = "week"
PERCENTILES = (50, 95)
# What became of an interrupt that closed: a reviewer's action, its expiry, or
# "other": closed without anyone's decision (its run failed, a refused answer
# was closed) or decided before decisions recorded their action.
OUTCOMES = (*ACTIONS, "expire", "other")
PERCENTILE_METHOD = "nearest-rank"


class UnknownPeriod(ValueError):
    """A period that is not one of ``PERIODS``: the caller answers 400 naming the ones there are."""

    def __init__(self, given):
        self.given = given
        super().__init__(f"period must be one of {', '.join(PERIODS)}, not {given!r}.")


def period_of(given: str | None) -> str:
    """``given`` checked against ``PERIODS`` (None or empty: the default), or ``UnknownPeriod``."""
    if given in (None, ""):
        return DEFAULT_PERIOD
    if given not in PERIODS:
        raise UnknownPeriod(given)
    return given


def nearest_rank(ordered: list[float], percentile: int) -> float | None:
    """The ``percentile``-th of ``ordered`` (ascending) by nearest rank, or None when there are none."""
    if not ordered:
        return None
    return ordered[max(math.ceil(percentile * len(ordered) / 100), 1) - 1]


def _spread(durations: list[float]) -> dict:
    ordered = sorted(durations)
    return {"count": len(ordered), **{f"p{p}_seconds": nearest_rank(ordered, p) for p in PERCENTILES}}


def _by(rows: list[dict], key: str, label: str) -> list[dict]:
    """Time to decision per value of ``key``, most decisions first, then by name."""
    groups: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        groups[row[key]].append(row["took"])
    spreads = [{label: name, **_spread(took)} for name, took in groups.items()]
    return sorted(spreads, key=lambda s: (-s["count"], s[label]))


def _outcome(row: dict) -> str:
    if row["status"] == Interrupt.Status.EXPIRED:
        return "expire"
    if row["closed_reason"] or row["action"] not in ACTIONS:
        return "other"
    return row["action"]


#: Who took a decided request: a policy's "auto-approve when" rule, a standing grant, or a person.
TAKEN_BY = ("by_policy", "by_grant", "by_person")


def _taken_by(row: dict) -> str:
    return "by_policy" if row["by_policy"] else "by_grant" if row["grant"] is not None else "by_person"


def _closed(since: datetime, now: datetime) -> tuple[list[dict], bool]:
    """Query 1: the interrupts closed in [since, now], newest first, and whether there were more than the bound."""
    standing = Decision.objects.filter(interrupt=OuterRef("pk"), superseded_at__isnull=True).order_by("-pk")
    username = f"user__{get_user_model().USERNAME_FIELD}"
    rows = list(
        Interrupt.objects.filter(closed_at__gte=since, closed_at__lte=now).exclude(status=Interrupt.Status.PENDING)
        .order_by("-closed_at", "-pk")
        .values("status", "closed_reason", "reason", "created_at", "closed_at", "escalated_at",
                agent=F("run__agent__name"), target=F("policy__target_minutes"),
                action=Subquery(standing.values("action")[:1]),
                reviewer=Subquery(standing.values(username)[:1]),
                grant=Subquery(standing.values("grant")[:1]),
                by_policy=Subquery(standing.values("by_policy")[:1]),
                looked=Subquery(standing.values("looked")[:1]))[: INSIGHT_MAX_ROWS + 1]
    )
    return rows[:INSIGHT_MAX_ROWS], len(rows) > INSIGHT_MAX_ROWS


def _pending(since: datetime, now: datetime) -> list[dict]:
    """Query 2: what waits now, by agent and reason, with how many are past their target or escalated."""
    # created_at + target_minutes minutes, in SQL on either database (the cast: SQLite's duration
    # arithmetic takes a plain IntegerField, not the PositiveIntegerField the column is).
    minutes = ExpressionWrapper(Cast("policy__target_minutes", IntegerField()) * Value(timedelta(minutes=1)),
                                output_field=DurationField())
    due = ExpressionWrapper(F("created_at") + minutes, output_field=DateTimeField())
    return list(
        Interrupt.objects.filter(status=Interrupt.Status.PENDING)
        .alias(due=due)
        .values(agent=F("run__agent__name"), kind=F("reason")).order_by("agent", "kind")
        .annotate(count=Count("pk"),
                  # As targets.target reads it: breached once now reaches created_at + target.
                  breached=Count("pk", filter=Q(policy__target_minutes__gt=0, due__lte=now)),
                  escalated=Count("pk", filter=Q(escalated_at__isnull=False)),
                  escalated_in_period=Count("pk", filter=Q(escalated_at__gte=since)))
    )


def _refused(since: datetime, now: datetime) -> list[dict]:
    """Query 3: resumes whose run failed in the period (the agent refused the answers), by agent and code."""
    ended = Coalesce("finished_at", "created_at")
    return list(
        Run.objects.filter(resume_key__isnull=False, status=Run.Status.FAILED)
        .alias(ended=ended).filter(ended__gte=since, ended__lte=now)
        .values("error_code", agent_name=F("agent__name")).order_by("agent_name", "error_code")
        .annotate(count=Count("pk"), waiting=Count("pk", filter=Q(settlement="")))
    )


def _late(row: dict) -> bool:
    # Still open when its target passed: decided (or expired, or closed) at or after created_at + target.
    return bool(row["target"]) and row["closed_at"] >= row["created_at"] + timedelta(minutes=row["target"])


def figures(period: str = DEFAULT_PERIOD, now: datetime | None = None) -> dict:
    """Every figure of the insight page for the last ``period`` (a key of ``PERIODS``), JSON-ready.

    Durations are seconds (floats, to the microsecond); times are ISO 8601.
    """
    now = now or timezone.now()
    since = now - PERIODS[period]
    closed, truncated = _closed(since, now)
    pending = _pending(since, now)
    refused = _refused(since, now)

    # A person's decisions: those a standing grant or a policy's rule took are counted apart
    # (``automatic``), not as the name they were taken in.
    decided = [{**row, "took": (row["closed_at"] - row["created_at"]).total_seconds()}
               for row in closed if _outcome(row) in ACTIONS and _taken_by(row) == "by_person"]
    automatic: dict[str, dict] = {}
    for row in closed:
        if _outcome(row) in ACTIONS:
            entry = automatic.setdefault(row["agent"], {"agent": row["agent"], **dict.fromkeys(TAKEN_BY, 0)})
            entry[_taken_by(row)] += 1
    for entry in automatic.values():
        entry["person_share"] = entry["by_person"] / sum(entry[k] for k in TAKEN_BY)
    for row in decided:
        row["reviewer"] = row["reviewer"] or "(deleted user)"

    outcome_counts = dict.fromkeys(OUTCOMES, 0)
    for row in closed:
        outcome_counts[_outcome(row)] += 1
    total_closed = len(closed)

    pending_by_agent: dict[str, dict] = {}
    pending_by_reason: dict[str, dict] = {}
    for row in pending:
        for table, key, label in ((pending_by_agent, row["agent"], "agent"),
                                  (pending_by_reason, row["kind"], "reason")):
            entry = table.setdefault(key, {label: key, "count": 0, "breached": 0, "escalated": 0})
            entry["count"] += row["count"]
            entry["breached"] += row["breached"]
            entry["escalated"] += row["escalated"]

    breaches: dict[str, dict] = {}

    def breach(agent: str) -> dict:
        return breaches.setdefault(agent, {"agent": agent, "closed_late": 0, "pending_past_target": 0,
                                           "escalated": 0})

    for row in closed:
        if _late(row):
            breach(row["agent"])["closed_late"] += 1
        if row["escalated_at"] is not None and row["escalated_at"] >= since:
            breach(row["agent"])["escalated"] += 1
    for row in pending:
        if row["breached"]:
            breach(row["agent"])["pending_past_target"] += row["breached"]
        if row["escalated_in_period"]:
            breach(row["agent"])["escalated"] += row["escalated_in_period"]

    refused_by_agent: dict[str, dict] = {}
    for row in refused:
        entry = refused_by_agent.setdefault(row["agent_name"], {"agent": row["agent_name"], "count": 0, "waiting": 0})
        entry["count"] += row["count"]
        entry["waiting"] += row["waiting"]

    def most_first(entries, label):
        return sorted(entries, key=lambda e: (-e["count"], e[label]))

    return {
        "period": period,
        "since": since.isoformat(),
        "until": now.isoformat(),
        "percentile_method": PERCENTILE_METHOD,
        # Past the bound, the figures cover the newest INSIGHT_MAX_ROWS closed interrupts, from "covers_since".
        "row_limit": INSIGHT_MAX_ROWS,
        "truncated": truncated,
        "covers_since": (closed[-1]["closed_at"] if truncated else since).isoformat(),
        "pending": {
            "total": sum(row["count"] for row in pending),
            "by_agent": most_first(pending_by_agent.values(), "agent"),
            "by_reason": most_first(pending_by_reason.values(), "reason"),
        },
        "time_to_decision": {
            "overall": _spread([row["took"] for row in decided]),
            "by_agent": _by(decided, "agent", "agent"),
            "by_reason": _by(decided, "reason", "reason"),
            "by_reviewer": _by(decided, "reviewer", "reviewer"),
        },
        "outcomes": {
            "total": total_closed,
            "counts": outcome_counts,
            "rates": {name: (n / total_closed if total_closed else 0.0) for name, n in outcome_counts.items()},
        },
        "looked": _looked(decided),
        # Decided requests approved by a policy's rule or a standing grant, next to those a person
        # decided, and the share of each agent's that still needed a person.
        "automatic": {
            **{k: sum(e[k] for e in automatic.values()) for k in TAKEN_BY},
            "by_agent": sorted(automatic.values(), key=lambda e: (e["person_share"], e["agent"])),
        },
        "breaches": {
            "closed_late": sum(b["closed_late"] for b in breaches.values()),
            "pending_past_target": sum(b["pending_past_target"] for b in breaches.values()),
            "escalated": sum(b["escalated"] for b in breaches.values()),
            "by_agent": sorted(breaches.values(), key=lambda b: b["agent"]),
        },
        "refused": {
            "total": sum(row["count"] for row in refused),
            "waiting": sum(row["waiting"] for row in refused),
            "by_agent": most_first(refused_by_agent.values(), "agent"),
            "by_code": most_first(
                [{"code": code, "count": sum(r["count"] for r in refused if r["error_code"] == code)}
                 for code in {r["error_code"] for r in refused}], "code"),
        },
    }


LOOKED_MEASURES = ("approvals", "unopened", "unopened_share", "median_seconds")


def _looked(decided: list[dict]) -> dict:
    """Of the approvals people made whose page reported what they had in view (``rules.looked``): how many
    were made without opening anything beyond the card's summary, and the median seconds on card; overall,
    by agent, and by reviewer only when the team chose to see that (COUNTERSIGN_INSIGHT_LOOKED_BY_REVIEWER)."""
    reported = [row for row in decided if row["action"] in ("approve", "edit") and isinstance(row["looked"], dict)]

    def summary(rows: list[dict]) -> dict:
        seconds = sorted(float(row["looked"].get("seconds") or 0) for row in rows)
        unopened = sum(1 for row in rows if not row["looked"].get("opened"))
        return {"approvals": len(rows), "unopened": unopened, "unopened_share": unopened / len(rows) if rows else 0.0,
                "median_seconds": nearest_rank(seconds, 50)}

    def by(key: str) -> list[dict]:
        groups: dict[str, list[dict]] = defaultdict(list)
        for row in reported:
            groups[row[key]].append(row)
        return sorted(({key: name, **summary(rows)} for name, rows in groups.items()),
                      key=lambda e: (-e["unopened_share"], e[key]))

    shown = settings.COUNTERSIGN_INSIGHT_LOOKED_BY_REVIEWER
    return {**summary(reported), "by_agent": by("agent"), "by_reviewer": by("reviewer") if shown else [],
            "by_reviewer_shown": shown}


def table_rows(found: dict) -> list[tuple[str, str, str, object]]:
    """``figures()`` flattened to (chart, label, measure, value) rows: what the CSV export writes, in order."""
    rows: list[tuple[str, str, str, object]] = [
        ("period", found["period"], "since", found["since"]),
        ("period", found["period"], "until", found["until"]),
        ("period", found["period"], "truncated", found["truncated"]),
        ("period", found["period"], "covers_since", found["covers_since"]),
        ("pending", "all", "count", found["pending"]["total"]),
    ]
    for by in ("agent", "reason"):
        for entry in found["pending"][f"by_{by}"]:
            rows += [(f"pending_by_{by}", entry[by], m, entry[m]) for m in ("count", "breached", "escalated")]
    measures = ("count", *(f"p{p}_seconds" for p in PERCENTILES))
    rows += [("time_to_decision", "all", m, found["time_to_decision"]["overall"][m]) for m in measures]
    for by in ("agent", "reason", "reviewer"):
        for entry in found["time_to_decision"][f"by_{by}"]:
            rows += [(f"time_to_decision_by_{by}", entry[by], m, entry[m]) for m in measures]
    for name in OUTCOMES:
        rows.append(("outcomes", name, "count", found["outcomes"]["counts"][name]))
        rows.append(("outcomes", name, "rate", found["outcomes"]["rates"][name]))
    for entry in found["automatic"]["by_agent"]:
        rows += [("decided_by_agent", entry["agent"], m, entry[m]) for m in (*TAKEN_BY, "person_share")]
    rows += [("looked", "all", m, found["looked"][m]) for m in LOOKED_MEASURES]
    for by in ("agent", "reviewer"):
        for entry in found["looked"][f"by_{by}"]:
            rows += [(f"looked_by_{by}", entry[by], m, entry[m]) for m in LOOKED_MEASURES]
    for entry in found["breaches"]["by_agent"]:
        rows += [("breaches_by_agent", entry["agent"], m, entry[m])
                 for m in ("closed_late", "pending_past_target", "escalated")]
    for entry in found["refused"]["by_agent"]:
        rows += [("refused_by_agent", entry["agent"], m, entry[m]) for m in ("count", "waiting")]
    rows += [("refused_by_code", entry["code"], "count", entry["count"]) for entry in found["refused"]["by_code"]]
    return rows
