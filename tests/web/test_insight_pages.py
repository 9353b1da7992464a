"""The insight page, its live part, its exports and GET /api/insight/: the same figures, for anyone logged in."""

import csv
import io
import json
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from interrupts.models import Interrupt

from .. import factories as make

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert(1)</script>"=cmd|\' /C calc\'!A0'


def _decided(agent, took, reviewer, *, reason="confirmation", action="approve"):
    made = make.interrupt(make.run(make.thread(agent=agent), status="interrupted"), reason=reason)
    make.decision(made, reviewer, status="cancelled" if action == "cancel" else "resolved", action=action,
                  payload=None if action == "cancel" else {"approved": True})
    closed = timezone.now() - timedelta(minutes=5)
    Interrupt.objects.filter(pk=made.pk).update(
        status="cancelled" if action == "cancel" else "resolved", created_at=closed - took, closed_at=closed)
    return made


@pytest.fixture
def team(client):
    """A reviewer logged in, two agents' decisions of known times, one pending: one reason is hostile text."""
    reader = make.user(username="reader-x")
    client.force_login(reader)
    mailer = make.agent(name="mailer-x")
    _decided(mailer, timedelta(minutes=4, seconds=12), reader)
    _decided(mailer, timedelta(seconds=30), reader, reason=HOSTILE)
    _decided(mailer, timedelta(hours=1), reader, action="cancel")
    make.interrupt(make.run(make.thread(agent=mailer), status="interrupted"), reason=HOSTILE)
    return reader


def test_the_page_shows_the_figures_in_words_charts_and_tables(client, team):
    page = client.get("/insight/")
    assert page.status_code == 200
    body = page.content.decode()
    # p50 of 30 s, 4 min 12 s and 1 h is 4 min 12 s; p95 is 1 h.
    assert re.search(r'data-testid="ttd-p50">4 min 12 s<', body)
    assert re.search(r'data-testid="ttd-p95">1 h<', body)
    assert 'data-testid="pending-total">1<' in body
    for chart in ("chart-ttd-agent", "chart-ttd-reason", "chart-ttd-reviewer", "chart-pending-agent",
                  "chart-pending-reason", "chart-outcomes"):
        assert f'id="{chart}"' in body, chart
    assert "<title>mailer-x, p50: 4 min 12 s (3 decisions)</title>" in body
    assert 'data-seconds="252.0"' in body
    assert 'aria-current="page">last week<' in body
    # Agents choose their reasons: escaped everywhere, in the SVG as in the tables.
    assert "<script>alert(1)" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    # No style attributes: the CSP refuses them.
    assert " style=" not in body
    assert 'src="/static/interrupts/insight.js"' in body


def test_the_page_names_its_periods_and_refuses_any_other(client, team):
    assert client.get("/insight/?period=day").status_code == 200
    refused = client.get("/insight/?period=year")
    assert refused.status_code == 400 and b"day, week, month" in refused.content
    assert client.get("/insight/export.csv?period=fortnight").status_code == 400
    assert client.get("/insight/export.xlsx").status_code == 404


def test_the_figures_part_is_what_the_live_page_swaps_in(client, team):
    part = client.get("/insight/?part=figures&period=week")
    body = part.content.decode()
    assert part.status_code == 200 and 'data-testid="ttd-p50"' in body
    assert "<html" not in body and "<nav" not in body


def test_anyone_logged_in_reads_it_and_nobody_else(client, team):
    client.logout()
    assert client.get("/insight/").status_code == 302
    assert client.get("/insight/export.json").status_code == 302
    assert client.get("/api/insight/").status_code == 401
    client.force_login(make.user(reviewer=False))
    assert client.get("/insight/").status_code == 200


def test_the_json_export_and_the_api_give_the_same_numbers(client, team):
    exported = client.get("/insight/export.json?period=week")
    assert exported.status_code == 200 and exported["Content-Type"] == "application/json"
    assert exported["Content-Disposition"].startswith('attachment; filename="countersign-insight-week-')
    api = client.get("/api/insight/?period=week").json()
    figures = json.loads(exported.content)
    for found in (figures, api):
        assert found["time_to_decision"]["overall"] == {"count": 3, "p50_seconds": 252.0, "p95_seconds": 3600.0}
        assert found["outcomes"]["counts"]["approve"] == 2 and found["outcomes"]["counts"]["cancel"] == 1
    figures.pop("until"), api.pop("until")
    figures.pop("since"), api.pop("since")
    figures.pop("covers_since"), api.pop("covers_since")
    assert figures == api


def test_the_csv_export_holds_every_number_and_runs_no_formula(client, team):
    exported = client.get("/insight/export.csv?period=month")
    assert exported.status_code == 200 and exported["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(exported.content.decode())))
    assert rows[0] == ["chart", "label", "measure", "value"]
    assert ["time_to_decision_by_agent", "mailer-x", "p95_seconds", "3600.0"] in rows
    assert ["time_to_decision_by_reviewer", "reader-x", "count", "3"] in rows
    assert ["outcomes", "cancel", "count", "1"] in rows
    hostile = [row for row in rows if HOSTILE in row[1]]
    assert hostile and all(not row[1].startswith(("=", "+", "-", "@")) for row in rows)
    formula = make.agent(name="x")  # names are slugs; a reason is the agent's own text, formula and all
    make.interrupt(make.run(make.thread(agent=formula), status="interrupted"), reason="=HYPERLINK(1)")
    rows = list(csv.reader(io.StringIO(client.get("/insight/export.csv").content.decode())))
    assert ["pending_by_reason", "'=HYPERLINK(1)", "count", "1"] in rows


def test_the_api_answers_a_token_and_refuses_an_unknown_period_by_name(client, team):
    client.logout()
    token = make.token(team)
    answered = client.get("/api/insight/", HTTP_AUTHORIZATION=f"Token {token}")
    assert answered.status_code == 200 and answered.json()["period"] == "week"
    refused = client.get("/api/insight/?period=quarter", HTTP_AUTHORIZATION=f"Token {token}")
    assert refused.status_code == 400
    assert refused.json()["code"] == "INVALID_PERIOD" and "day, week, month" in refused.json()["detail"]


def test_prometheus_finds_the_metrics_where_it_looks_by_default(client, staff):
    root, api = client.get("/metrics"), client.get("/api/metrics/")
    assert root.status_code == api.status_code == 200
    assert b"countersign_pending_interrupts" in root.content
    assert root["Content-Type"] == api["Content-Type"]
    client.force_login(make.user())
    assert client.get("/metrics").status_code == 403
    client.logout()
    assert client.get("/metrics").status_code == 401


def test_an_agent_with_endless_reasons_cannot_grow_the_page_past_its_bound(client, team):
    # Agents choose their reasons: 100,000 distinct ones drew a 40 MB page, re-read by every open
    # insight page on each inbox change. The page shows the most; the export keeps every one.
    from interrupts.conf import INSIGHT_CHART_ROWS

    run = make.run(make.thread(agent=make.agent(name="chatty-x")), status="interrupted")
    Interrupt.objects.bulk_create([Interrupt(run=run, run_agent=run.agent, interrupt_id=f"many-{n}", reason=f"many-{n}",
                                             raw={}) for n in range(INSIGHT_CHART_ROWS + 5)])
    body = client.get("/insight/").content.decode()
    shown = set(re.findall(r"many-\d+", body))
    assert len(shown) == INSIGHT_CHART_ROWS - 1  # the hostile reason, waiting too, sorts first
    assert "6 more in the export" in body and f"Pending now by reason (the {INSIGHT_CHART_ROWS} most of 31)" in body
    exported = client.get("/insight/export.csv").content.decode()
    assert len(set(re.findall(r"many-\d+", exported))) == INSIGHT_CHART_ROWS + 5
