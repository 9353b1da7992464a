"""The audit trail page, and its exports: the rows as CSV or JSON, and the whole hash chain."""

from __future__ import annotations

import csv
import json

from django.core.paginator import Paginator
from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from ..conf import AUDIT_PAGE_SIZE
from ..hub.trail import chain, checkpoints
from ..models import Thread
from ..protocol import trail
from ..reads import selectors
from .exports import csv_safe
from .navigation import without_page


def audit(request, thread_id: str | None = None):
    params = request.GET.copy()
    if thread_id:
        get_object_or_404(Thread, thread_id=thread_id)
        params["thread"] = thread_id
    filters = selectors.AuditFilters.from_query(params)
    queryset = selectors.audit(filters)
    export = request.GET.get("format")
    if export == "chain":  # the whole chain, verifiable offline: the API's export (a session reads it too)
        return redirect("audit-export")
    if export in ("csv", "json"):
        return _export(queryset, export)
    page = Paginator(queryset, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    # The last verification, extended by the entries since (links only, a
    # bounded number): the page never recomputes a long chain whole.
    checkpoint, broken = checkpoints.verify_recent()
    return render(request, "interrupts/audit.html", {
        "checkpoint": checkpoint,
        "trail_problem": str(broken) if broken else (checkpoint.problem.split("\n")[0] if checkpoint else ""),
        "filters": filters,
        "rows": selectors.audit_rows(page.object_list),
        "page": page,
        "thread_id": thread_id,
        "agents": selectors.agent_names(),
        "query": without_page(request.GET),
    })


class _Echo:
    def write(self, value):
        return value


def _export(queryset, kind: str):
    """Every matching row, streamed in pages so a large trail never sits in memory whole."""
    # Each row carries auditHead, the chain's head as the export began: a copy
    # kept outside the database lets ``audit verify --expect-head`` find a deleted tail.
    anchor = str(chain.head())

    def rows():
        paginator = Paginator(queryset, 500)
        for number in paginator.page_range:
            for row in selectors.audit_rows(paginator.page(number).object_list):
                yield {**row.as_dict(), "auditHead": anchor}

    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    if kind == "json":
        def body():
            yield "[\n"
            for index, row in enumerate(rows()):
                yield ("," if index else "") + json.dumps(row, ensure_ascii=False) + "\n"
            yield "]\n"
        response = StreamingHttpResponse(body(), content_type="application/json")
    else:
        writer = csv.writer(_Echo())

        def body():
            header = None
            for row in rows():
                flat = {k: (json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else v)
                        for k, v in row.items()}
                if header is None:
                    header = list(flat)
                    yield writer.writerow(header)
                yield writer.writerow([csv_safe(flat[k]) for k in header])
        response = StreamingHttpResponse(body(), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="countersign-audit-{stamp}.{kind}"'
    response[trail.HEAD_HEADER] = anchor
    return response
