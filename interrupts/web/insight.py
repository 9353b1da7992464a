"""The insight page (/insight/), its live figures part and its exports: what ``insight.figures`` computes.

Anyone logged in reads it, like the audit trail: every figure here (who
decided what, how fast) can be read off that trail already, and a team
reads its own pace to improve it. The Prometheus door stays staff-only: it
is for machines, scraped with a staff token.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime

from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.utils import timezone

from ..conf import INSIGHT_CHART_ROWS
from ..reads import insight
from . import charts
from .exports import csv_safe
from .templatetags.countersign import reason_words

# The figures as the charts show them; the page's tables give every number too.
OUTCOME_LABELS = {"approve": "approved", "edit": "edited", "respond": "answered", "reject": "rejected",
                  "cancel": "dismissed", "expire": "expired", "other": "closed otherwise"}


def _period(request):
    """The asked-for period, or a 400 response naming the ones there are."""
    try:
        return insight.period_of(request.GET.get("period")), None
    except insight.UnknownPeriod as unknown:
        return None, HttpResponseBadRequest(f"Unknown period: {unknown}", content_type="text/plain; charset=utf-8")


def _decisions(n: int) -> str:
    return f"{n} decision{'s' if n != 1 else ''}"


def _shown(entries: list) -> list:
    """The most of ``entries`` (sorted most first) the page shows: INSIGHT_CHART_ROWS; the export has them all."""
    return entries[:INSIGHT_CHART_ROWS]


def _more(entries: list) -> int:
    return max(len(entries) - INSIGHT_CHART_ROWS, 0)


def _titled(title: str, entries: list) -> str:
    return f"{title} (the {INSIGHT_CHART_ROWS} most of {len(entries)})" if _more(entries) else title


def _label(entry: dict, by: str) -> str:
    """A row's label: a reason in the inbox's words ("Tool call"), an agent's or reviewer's name as it is."""
    return reason_words(entry[by]) if by == "reason" else entry[by]


def _named(entry: dict, by: str) -> str:
    """What a label stands for, when it is not the value itself: the agent's exact reason ("" otherwise)."""
    label = _label(entry, by)
    return f"{label} ({entry[by]})" if label != entry[by] else ""


def _ttd_chart(found: dict, by: str, title: str) -> str:
    rows = [charts.Row(_label(entry, by), (entry["p50_seconds"], entry["p95_seconds"]), _decisions(entry["count"]),
                       named=_named(entry, by))
            for entry in _shown(found["time_to_decision"][f"by_{by}"])]
    return charts.bars(_titled(title, found["time_to_decision"][f"by_{by}"]), rows, ("p50", "p95"),
                       axis="time to decision", text=charts.duration_text,
                       steps=charts.DURATION_STEPS, chart_id=f"chart-ttd-{by}")


def _pending_chart(found: dict, by: str, title: str) -> str:
    rows = [charts.Row(_label(entry, by), (entry["count"],),
                       f"{entry['breached']} past target, {entry['escalated']} escalated", named=_named(entry, by))
            for entry in _shown(found["pending"][f"by_{by}"])]
    return charts.bars(_titled(title, found["pending"][f"by_{by}"]), rows, ("pending",),
                       axis="interrupts pending", chart_id=f"chart-pending-{by}",
                       empty="nothing waits for a decision")


def _ttd_table(found: dict, by: str) -> dict:
    rows = [{"label": _label(e, by), "named": _named(e, by), "count": e["count"],
             **{f"p{p}": charts.duration_text(e[f"p{p}_seconds"]) for p in insight.PERCENTILES},
             **{f"p{p}_seconds": e[f"p{p}_seconds"] for p in insight.PERCENTILES}}
            for e in _shown(found["time_to_decision"][f"by_{by}"])]
    return {"by": by, "caption": f"Time to decision by {by}", "rows": rows,
            "more": _more(found["time_to_decision"][f"by_{by}"])}


def _pending_table(found: dict, by: str) -> dict:
    rows = [{"label": _label(e, by), "named": _named(e, by), **{k: e[k] for k in ("count", "breached", "escalated")}}
            for e in _shown(found["pending"][f"by_{by}"])]
    return {"by": by, "caption": f"Pending now by {by}", "rows": rows, "more": _more(found["pending"][f"by_{by}"])}


def _context(found: dict) -> dict:
    outcomes = found["outcomes"]
    return {
        "found": found,
        "since": datetime.fromisoformat(found["since"]),
        "covers_since": datetime.fromisoformat(found["covers_since"]),
        "ttd_tables": [_ttd_table(found, by) for by in ("agent", "reason", "reviewer")],
        "pending_tables": [_pending_table(found, by) for by in ("agent", "reason")],
        "periods": list(insight.PERIODS),
        "outcomes": [{"name": name, "label": OUTCOME_LABELS[name], "count": outcomes["counts"][name],
                      "rate": outcomes["rates"][name]} for name in insight.OUTCOMES],
        "charts": {
            "ttd_agent": _ttd_chart(found, "agent", "Time to decision by agent"),
            "ttd_reason": _ttd_chart(found, "reason", "Time to decision by reason"),
            "ttd_reviewer": _ttd_chart(found, "reviewer", "Time to decision by reviewer"),
            "pending_agent": _pending_chart(found, "agent", "Pending now by agent"),
            "pending_reason": _pending_chart(found, "reason", "Pending now by reason"),
            "outcomes": charts.stacked("What became of the interrupts closed",
                                       [(name, outcomes["counts"][name]) for name in insight.OUTCOMES],
                                       chart_id="chart-outcomes", labels=OUTCOME_LABELS),
        },
        "overall": {key: charts.duration_text(found["time_to_decision"]["overall"][f"{key}_seconds"])
                    for key in ("p50", "p95")},
    }


def page(request):
    period, refused = _period(request)
    if refused:
        return refused
    found = insight.figures(period)
    # The live refresh asks for the figures alone (insight.js), to swap them in.
    template = "interrupts/_insight_figures.html" if request.GET.get("part") == "figures" else "interrupts/insight.html"
    return render(request, template, _context(found))


def export(request, kind: str):
    """Every number behind the page's charts: JSON as the API answers it, or CSV rows (chart, label, measure, value)."""
    period, refused = _period(request)
    if refused:
        return refused
    found = insight.figures(period)
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    if kind == "json":
        response = HttpResponse(json.dumps(found, ensure_ascii=False, indent=1), content_type="application/json")
    else:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["chart", "label", "measure", "value"])
        # Labels are agents' names and reasons: a leading = + - @ must not run as a spreadsheet formula.
        writer.writerows([csv_safe(cell) for cell in row] for row in insight.table_rows(found))
        response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="countersign-insight-{period}-{stamp}.{kind}"'
    return response
