"""The goals of issue 12 ("fast at a team's scale"), each against this run's figures, on both back ends.

`make bench` runs this last. It reads bench/results/<name>.json as the
benchmarks of this invocation wrote them (their ``run`` is the BENCH_RUN the
Makefile sets; a file from an earlier run, or none at all, is reported as not
measured, never silently reused) and prints one row per figure: SQLite +
in-memory layer, PostgreSQL + Redis, the goal, met or not, and the baseline
of a ratio (measured in the same run). Also bench/results/summary.json and
summary.md (the same table in Markdown).

    .venv/bin/python bench/summary.py            # the figures of the latest `make bench`
    .venv/bin/python bench/summary.py --any-run  # whatever each file holds, with its date
    .venv/bin/python bench/summary.py --docs     # also rewrite docs/benchmarks.md's tables and machine line

``--docs`` replaces what lies between the ``<!-- bench:summary -->`` and
``<!-- /bench:summary -->`` markers in docs/benchmarks.md (and the same for
``bench:scaling``, ``bench:machine``); nothing else in the file is touched.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from report import RESULTS, run_folder, table

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "benchmarks.md"
BACKENDS = (("sqlite", "SQLite + in-memory"), ("postgres", "PostgreSQL + Redis"))


@dataclass
class Cell:
    text: str  # the figure as shown, or why there is none
    met: bool | None = None  # None: not measured
    baseline: str = ""


@dataclass
class Figure:
    name: str
    goal: str
    source: str  # the benchmark (bench/<source>.py, results/<source>.json)
    cells: dict[str, Cell] = field(default_factory=dict)
    baseline_label: str = ""  # what the baseline is, before its values


class Results:
    """This run's bench/results/*.json, and why any is missing."""

    def __init__(self, run: str, any_run: bool, folder: Path = RESULTS) -> None:
        self.run, self.any_run, self.folder = run, any_run, folder
        self.documents: dict[str, dict] = {}
        self.problems: dict[str, str] = {}
        self.services = ""

    def get(self, name: str) -> dict | None:
        if name in self.documents or name in self.problems:
            return self.documents.get(name)
        path = self.folder / f"{name}.json"
        if self.run and not self.any_run and (run_folder(self.run, self.folder) / f"{name}.json").exists():
            path = run_folder(self.run, self.folder) / f"{name}.json"  # this run's copy, whatever ran since
        if not path.exists():
            self.problems[name] = f"bench/{name}.py wrote no results (bench/results/{name}.json is missing)"
            return None
        document = json.loads(path.read_text())
        if not self.any_run and self.run and document.get("run") != self.run:
            self.problems[name] = (f"bench/{name}.py did not finish in this run (bench/results/{name}.json is "
                                   f"from {document.get('measured_at', 'an earlier run')})")
            return None
        self.documents[name] = document
        return document

    def backend(self, name: str, backend: str) -> dict | None:
        document = self.get(name)
        if document is None:
            return None
        return document["results"].get(backend)


def number(value, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def at_most(value, goal) -> bool:
    return value is not None and value <= goal


def interrupt_latency(results: Results) -> Figure:
    figure = Figure("interrupt → inbox socket, 50 runs at once, p50 / p99 ms", "≤ 25 / ≤ 100", "interrupt_latency")
    for backend, _ in BACKENDS:
        found = results.backend(figure.source, backend)
        if found is None:
            continue
        scenario = next((v for k, v in found.items() if k.startswith("50 ")), None)
        if scenario is None or scenario["p50_ms"] is None:
            figure.cells[backend] = Cell("none arrived" if scenario else "no 50-run scenario", False)
            continue
        lost = scenario.get("missing", 0)
        text = f"{number(scenario['p50_ms'])} / {number(scenario['p99_ms'])}" + (
            f" ({lost} of 50 lost)" if lost else ""
        )
        figure.cells[backend] = Cell(text, at_most(scenario["p50_ms"], 25) and at_most(scenario["p99_ms"], 100)
                                     and not lost)
    return figure


def resume(results: Results) -> list[Figure]:
    whole = Figure("decision request → resume at the agent, p50 ms", "≤ 15", "resume_latency",
                   baseline_label="an API read: ")
    answer = Figure("the decision request's own answer, p50 ms", "≤ 10", "resume_latency",
                    baseline_label="an API read: ")
    for backend, _ in BACKENDS:
        found = results.backend(whole.source, backend)
        if found is None:
            continue
        floor = f"{number(found['api_read_p50_ms'])} ms" if "api_read_p50_ms" in found else ""
        whole.cells[backend] = Cell(number(found["resume_p50_ms"]), at_most(found["resume_p50_ms"], 15), floor)
        answer.cells[backend] = Cell(number(found["decide_response_p50_ms"]),
                                     at_most(found["decide_response_p50_ms"], 10), floor)
    return [whole, answer]


def relay(results: Results) -> list[Figure]:
    ratio = Figure("relay: stored + on the socket ÷ bare httpx read, same run", "≥ 0.3", "relay_throughput",
                   baseline_label="bare httpx read: ")
    cpu = Figure("relay: server CPU per event, µs", "≤ 10", "relay_throughput")
    for backend, _ in BACKENDS:
        found = results.backend(ratio.source, backend)
        if found is None:
            continue
        hub = found["countersign"]
        cut = "" if hub["complete"] else " (cut at the time limit)"
        baseline = f"{number(found['baseline_events_per_s'])} ev/s"
        if found["ratio"] is None:
            ratio.cells[backend] = Cell("nothing arrived", False, baseline)
        else:
            ratio.cells[backend] = Cell(f"{found['ratio']:.3f} ({number(hub['events_per_s'])} ev/s){cut}",
                                        found["ratio"] >= 0.3, baseline)
        value = hub["server_cpu_us_per_event"]
        cpu.cells[backend] = Cell("n/a" if value is None else number(value), at_most(value, 10))
    return [ratio, cpu]


def connections(results: Results) -> Figure:
    figure = Figure("one broadcast to 1,000 idle inbox sockets: last heard, ms / server CPU, s", "≤ 100 / ≤ 0.1",
                    "connections")
    for backend, _ in BACKENDS:
        found = results.backend(figure.source, backend)
        if found is None:
            continue
        best = found.get("broadcast")
        if not best:
            figure.cells[backend] = Cell("no broadcast was heard", False)
            continue
        missed = best["open_sockets"] - best["heard"]
        text = f"{number(best['last_ms'])} / {best['server_cpu_s']:.2f}" + (f" ({missed} did not hear it)"
                                                                            if missed else "")
        figure.cells[backend] = Cell(text, at_most(best["last_ms"], 100) and at_most(best["server_cpu_s"], 0.1)
                                     and not missed and found["sockets"] >= 1000)
    return figure


def _inbox_scale(results: Results, figure: Figure, part: str, label: str):
    """Each back end's ``part`` of inbox_scale's results ("results": the list's pages; "opened": one request
    opened) at its large size and at its baseline size, with the figure's baseline label set."""
    document = results.get(figure.source)
    if document is None or part not in document:
        return
    large, small = str(document.get("interrupts", 100_000)), str(document.get("baseline", 100))
    figure.baseline_label = label.format(small=small)
    for backend, _ in BACKENDS:
        found = document[part].get(backend)
        if found and large in found:
            yield backend, found[large], found.get(small, {})


def inbox(results: Results) -> Figure:
    figure = Figure("inbox with 100,000 pending, slowest of the three pages, ms", "≤ 50", "inbox_scale")
    for backend, large, small in _inbox_scale(results, figure, "results", "that page with {small} pending: "):
        # The three of the issue: the first page, a filtered page and a deep page ("all pending" is a fourth view).
        pages = {page: v["ms"] for page, v in large.items() if page != "all pending"}
        slowest = max(pages, key=pages.get)
        # The deep page is "page 500" at 100,000 and the last page ("page 4") at 100: match on the first word.
        baseline = next((v["ms"] for page, v in small.items() if page.split()[0] == slowest.split()[0]), None)
        figure.cells[backend] = Cell(f"{number(pages[slowest])}: {slowest}", at_most(pages[slowest], 50),
                                     f"{number(baseline)} ms" if baseline is not None else "")
    return figure


def small_inbox(results: Results) -> Figure:
    figure = Figure("inbox with 100 pending, first page, server ms", "≤ 20", "inbox_scale")
    document = results.get(figure.source)
    if document is None or "results" not in document:
        return figure
    large, small = str(document.get("interrupts", 100_000)), str(document.get("baseline", 100))
    figure.name = f"inbox with {int(small):,} pending, first page, server ms"
    figure.baseline_label = f"that page with {int(large):,} pending: "
    for backend, _ in BACKENDS:
        found = (document["results"].get(backend) or {})
        page = found.get(small, {}).get("first page")
        if page is not None:
            at_large = found.get(large, {}).get("first page")
            figure.cells[backend] = Cell(number(page["ms"]), at_most(page["ms"], 20),
                                         f"{number(at_large['ms'])} ms" if at_large else "")
    return figure


def opened(results: Results) -> Figure:
    figure = Figure("inbox with 100,000 pending, one request opened (its batch), ms", "≤ 20", "inbox_scale")
    for backend, large, small in _inbox_scale(results, figure, "opened", "with {small} pending: "):
        baseline = small.get("ms")
        figure.cells[backend] = Cell(number(large["ms"]), at_most(large["ms"], 20),
                                     f"{number(baseline)} ms" if baseline is not None else "")
    return figure


def figures(results: Results) -> list[Figure]:
    return [interrupt_latency(results), *resume(results), *relay(results), connections(results), inbox(results),
            opened(results), small_inbox(results)]


def verdict(figure: Figure) -> str:
    met = [figure.cells[b].met if b in figure.cells else None for b, _ in BACKENDS]
    if all(m is None for m in met):
        return "not measured"
    if all(met):
        return "met"
    if not any(met):
        return "not met" + ("" if all(m is not None for m in met) else " (one back end not measured)")
    return "; ".join(f"{'met' if m else 'not met' if m is False else 'not measured'} on {label.split()[0]}"
                     for m, (_, label) in zip(met, BACKENDS, strict=False))


def rows_of(all_figures: list[Figure]) -> list[list[str]]:
    rows = []
    for figure in all_figures:
        cells = [figure.cells[b].text if b in figure.cells else "not measured" for b, _ in BACKENDS]
        baselines = [figure.cells[b].baseline if b in figure.cells else "" for b, _ in BACKENDS]
        baseline = (figure.baseline_label + " / ".join(b or "not measured" for b in baselines)
                    if any(baselines) else "—")
        rows.append([figure.name, *cells, figure.goal, verdict(figure), baseline])
    return rows


HEADER = ["figure", *(label for _, label in BACKENDS), "goal, both", "met?", "baseline, same run (SQLite / PG)"]


def markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def scaling_rows(results: Results) -> list[list[str]] | None:
    """bench/scaling.py at each level, per deployment: latency p50 / p99 and the relay ratio."""
    document = results.get("scaling")
    if document is None:
        return None
    rows = []
    for result in document["results"].values():
        for runs in document["levels"]:
            lat, rel = result["latency"][str(runs)], result["relay"][str(runs)]
            latency = (f"{number(lat['p50_ms'])} / {number(lat['p99_ms'])}" if lat["p50_ms"] is not None
                       else "none heard") + (f" ({lat['lost']} lost)" if lat["lost"] else "")
            rate = (f"{number(rel['events_per_s'])} / {number(rel['baseline_events_per_s'])} = {rel['ratio']:.3f}"
                    if rel["events_per_s"] else "nothing heard")
            cpu = "n/a" if rel["server_cpu_us_per_event"] is None else number(rel["server_cpu_us_per_event"])
            rows.append([result["label"], str(runs), latency, rate, cpu])
    return rows


SCALING_HEADER = ["deployment", "runs at once", "interrupt → inbox p50 / p99 ms",
                  "relay ev/s ÷ bare httpx ev/s = ratio", "server CPU µs/event"]


def service_versions() -> str:
    """PostgreSQL's and Redis's versions, when the environment names them."""
    found = []
    database, redis_url = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    try:
        if database.startswith("postgres"):
            import psycopg

            with psycopg.connect(database, connect_timeout=5) as connection:
                found.append("PostgreSQL " + connection.execute("SHOW server_version").fetchone()[0].split()[0])
        if redis_url:
            import redis

            found.append("Redis " + redis.Redis.from_url(redis_url, socket_timeout=5).info()["redis_version"])
    except Exception as problem:  # a version is a nicety: never fail the summary over it
        found.append(f"(versions unknown: {problem.__class__.__name__})")
    return ", ".join(found)


def machine_line(results: Results) -> str:
    documents = list(results.documents.values())
    if not documents:
        return "No results of this run."
    latest = max(documents, key=lambda d: d["measured_at"])
    about = latest["machine"]
    loads = [d["machine"].get("load_average", [None])[0] for d in documents if d["machine"].get("load_average")]
    parts = [f"{about['cpus']} cores"]
    if about.get("memory_gib"):
        parts.append(f"{about['memory_gib']:g} GiB")
    parts += [f"Python {about['python']}", about["platform"]]
    versions = service_versions()
    saved = run_folder(results.run) / "summary.json" if results.run else None
    if not versions and saved and saved.exists():  # outside `make bench`: what that run's summary found
        versions = json.loads(saved.read_text()).get("services", "")
    if versions:
        parts.append(versions)
    results.services = versions
    if loads:
        parts.append(f"1-minute load average {min(loads):.1f}–{max(loads):.1f} while measuring")
    commits = sorted({d.get("commit", "") for d in documents} - {""})
    return (f"Measured {latest['measured_at'][:10]} at commit {', '.join(commits) or '?'} on "
            + ", ".join(parts) + "; DEBUG off, static files collected, as deployed (bench/backends.PRODUCTION).")


def replace_between(text: str, marker: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- {marker} -->\n).*?(<!-- /{marker} -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"docs/benchmarks.md has no <!-- {marker} --> … <!-- /{marker} --> markers")
    return pattern.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), text, count=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--any-run", action="store_true",
                        help="Use every results file, whichever run wrote it (their dates are shown).")
    parser.add_argument("--docs", action="store_true", help="Rewrite docs/benchmarks.md's marked figures from these.")
    args = parser.parse_args()
    run = os.environ.get("BENCH_RUN", "")
    if not run and not args.any_run:
        # Outside `make bench`: the latest `make bench` run (its folder's name starts with when it began).
        folders = sorted(p.name for p in (RESULTS / "runs").glob("*/"))
        run = folders[-1] if folders else ""
    results = Results(run, args.any_run or not run)
    runs = sorted((RESULTS / "runs").glob("*/"))
    for old in runs[:-5]:  # keep the last five runs' copies
        shutil.rmtree(old, ignore_errors=True)
    all_figures = figures(results)
    rows = rows_of(all_figures)
    print()
    table("Issue 12, fast at a team's scale: this run's figures against the goals", HEADER, rows)
    unmeasured = sorted(results.problems.values())
    for problem in unmeasured:
        print(f"  NOT MEASURED: {problem}")
    if any(not f.cells for f in all_figures) and not unmeasured:
        print("  NOT MEASURED: some figures (see the table)")
    if results.any_run:
        print("  (not one `make bench` run: each figure is from whenever its file was written: "
              + ", ".join(f"{name} {d['measured_at'][:16]}" for name, d in sorted(results.documents.items())) + ")")
    scaled = scaling_rows(results)
    if scaled:
        print()
        table("bench/scaling.py: the same figures from 1 to 200 runs at once", SCALING_HEADER, scaled)
    machine = machine_line(results)
    print(machine)

    met = sum(1 for f in all_figures if verdict(f) == "met")
    print(f"Goals met on both back ends: {met} of {len(all_figures)}.")
    document = {
        "run": run, "machine": machine, "services": results.services, "header": HEADER, "rows": rows,
        "not_measured": unmeasured,
        "figures": [{"name": f.name, "goal": f.goal, "source": f.source, "verdict": verdict(f),
                     "cells": {b: vars(c) for b, c in f.cells.items()}} for f in all_figures],
        "scaling_rows": scaled,
    }
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    (RESULTS / "summary.json").write_text(text)
    if run and os.environ.get("BENCH_RUN") == run:
        (run_folder(run) / "summary.json").write_text(text)  # with the services' versions, for --docs later
    summary_md = markdown(rows)
    if unmeasured:
        summary_md += "\n\n" + "\n".join(f"Not measured: {p}." for p in unmeasured)
    (RESULTS / "summary.md").write_text(summary_md + "\n")
    if args.docs:
        text = FIGURES.read_text()
        text = replace_between(text, "bench:summary", summary_md)
        text = replace_between(text, "bench:machine", machine)
        if scaled:
            lines = ["| " + " | ".join(SCALING_HEADER) + " |", "|" + " --- |" * len(SCALING_HEADER)]
            lines += ["| " + " | ".join(row) + " |" for row in scaled]
            text = replace_between(text, "bench:scaling", "\n".join(lines))
        FIGURES.write_text(text)
        print("rewrote the marked figures in docs/benchmarks.md")
        # The chart and its data that docs/benchmarks.md shows: this run's, even if scaling.py ran by hand since.
        for name in ("scaling.json", "scaling.svg"):
            copy = run_folder(run) / name if run else None
            if copy and copy.exists():
                shutil.copyfile(copy, RESULTS / name)
                print(f"bench/results/{name}: this run's")
            elif scaled:
                print(f"NOTE: no bench/results/runs/{run}/{name}: "
                      f"bench/results/{name} may not match docs/benchmarks.md")


if __name__ == "__main__":
    sys.exit(main())
