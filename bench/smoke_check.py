"""Each smoke figure's ratio to its same-run baseline against bench/smoke_reference.json; exit 1 if one moved too far.

Timings on a shared machine, at a smoke's small sizes, are noisy; what a change
moves is a figure against the baseline measured beside it in the same run
(relay ÷ a bare httpx read of the same agent, 50 runs at once ÷ one at a
time, a catastrophic pattern ÷ a plain one...). `make bench-smoke` runs this
last (bench/run.py, when BENCH_REFERENCE names the reference): it prints every
figure it compares with how far it moved, and fails on one that moved more than
FACTOR times either way from the reference, or that this run did not produce.

    .venv/bin/python bench/smoke_check.py                        # BENCH_RESULTS' figures against the reference
    .venv/bin/python bench/smoke_check.py --record DIR [DIR ...]  # a new reference from smoke runs' folders

To re-record (after a change that moves a figure on purpose, or a change to
BENCH_SMOKE's sizes): run `make bench-smoke` three times or more; each prints
its results folder (/tmp/cs-bench-smoke-*); `--record` those folders. Each
figure's reference is the median of the ratios seen (``middle``), and the
ratios seen are kept beside it; `--record` names the figures whose ratios
spread more than FACTOR times, and how many of those runs the reference fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from report import RESULTS, table
from summary import Results

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "bench" / "smoke_reference.json"
#: A figure fails when its ratio is above FACTOR × its reference, or below its reference ÷ FACTOR.
FACTOR = 2
IN_PROCESS = "in process"  # the "back end" of a benchmark of pure code (bench/sse_reader.py)
#: Ratios printed with how far they moved, but not judged: on this 2-core machine they moved past FACTOR
#: with no change behind them even run alone (50 at once ÷ one at a time: 1.0–3.4 on SQLite and 2.2–8.8
#: on PostgreSQL across the runs recorded and checked), so failing on them would fail CI at random.
ADVISORY = {("interrupt_latency", "p50, 50 runs at once ÷ one at a time")}

Ratio = tuple[str, str, float | None]  # figure, back end, this run's ratio (None: the benchmark gave none)


def ratio(figure: float | None, baseline: float | None) -> float | None:
    return figure / baseline if figure and baseline else None


def relay_throughput(results: dict) -> Iterator[Ratio]:
    for backend, found in results.items():
        yield "stored + on the socket ÷ a bare httpx read", backend, found["ratio"]


def scaling(results: dict) -> Iterator[Ratio]:
    for deployment, found in results.items():
        for runs, relay in found["relay"].items():
            yield f"relay at {runs} at once ÷ as many bare httpx reads", deployment, relay["ratio"]


def interrupt_latency(results: dict) -> Iterator[Ratio]:
    for backend, found in results.items():
        alone = next((v for k, v in found.items() if k.startswith("1 ")), {})
        many = next((v for k, v in found.items() if k.startswith("50 ")), {})
        yield "p50, 50 runs at once ÷ one at a time", backend, ratio(many.get("p50_ms"), alone.get("p50_ms"))


def resume_latency(results: dict) -> Iterator[Ratio]:
    for backend, found in results.items():
        yield ("p50, decision request → resume at the agent ÷ the request's own answer", backend,
               ratio(found["resume_p50_ms"], found["decide_response_p50_ms"]))


def connections(results: dict) -> Iterator[Ratio]:
    for backend, found in results.items():
        heard = found.get("broadcast") or {}
        yield "broadcast, the last socket to hear it ÷ the first", backend, ratio(heard.get("last_ms"),
                                                                                  heard.get("first_ms"))


def inbox_scale(results: dict) -> Iterator[Ratio]:
    for backend, found in results.items():
        few, many = sorted(found, key=int)
        # Page by page: the slowest of them (bench/summary.py's figure) flips between the first page
        # and the filtered one from run to run at these sizes, and their ratios are 1 and 2.
        for page, measured in found[many].items():
            # The deep page is "page 12" at 300 and "page 2" at 30: matched on the first word, as the benchmark does.
            base = next((v["ms"] for k, v in found[few].items() if k.split()[0] == page.split()[0]), None)
            name = "the deep page" if page.startswith("page ") else page
            yield f"{name} at {many} pending ÷ at {few}", backend, ratio(measured["ms"], base)


def hostile_schema(results: dict) -> Iterator[Ratio]:
    for backend, found in results.items():
        for answer, measured in found["pattern"].items():
            yield f"refusing {answer}, catastrophic pattern ÷ plain", backend, measured["ratio"]
        yield "thread A's approval while B's hostile answers are checked ÷ alone", backend, \
            found["concurrent"]["ratio"]


def long_thread(results: dict) -> Iterator[Ratio]:
    for backend, found in results.items():
        yield "written per token on a long thread ÷ its conversation", backend, found["written_share"]


def sse_reader(results: dict) -> Iterator[Ratio]:
    for case, measured in results.items():
        yield f"{case} ÷ in one chunk", IN_PROCESS, measured["ratio"]


#: Each benchmark of the smoke, and its ratios from its results (the "results" of bench/results/<name>.json).
BENCHMARKS: dict[str, Callable[[dict], Iterator[Ratio]]] = {
    f.__name__: f for f in (relay_throughput, scaling, interrupt_latency, resume_latency, connections,
                            inbox_scale, hostile_schema, long_thread, sse_reader)
}


def measured(results: Results) -> tuple[dict[tuple[str, str, str], float | None], dict[str, str]]:
    """This run's ratios by (benchmark, figure, back end), and why each benchmark without results has none."""
    found, missing = {}, {}
    for name, ratios in BENCHMARKS.items():
        document = results.get(name)
        if document is None:
            missing[name] = results.problems[name]
            continue
        for figure, backend, value in ratios(document["results"]):
            found[name, figure, backend] = value
    return found, missing


def moved(reference: float, value: float) -> float:
    """How many times higher or lower than the reference (1 or more, either way)."""
    return max(value / reference, reference / value)


def described(reference: float, value: float) -> str:
    return f"{moved(reference, value):.2f}× {'higher' if value >= reference else 'lower'}"


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def check(reference_path: Path, folder: Path, run: str, moved_to: Path | None = None) -> int:
    reference = json.loads(reference_path.read_text())
    found, missing = measured(Results(run, not run, folder))
    expected = {(name, figure, backend): entry for name, figures in reference["figures"].items()
                for figure, backends in figures.items() for backend, entry in backends.items()}
    rows, failures, failed_benchmarks = [], [], set()
    for key in sorted(expected.keys() | found.keys()):
        name, figure, backend = key
        entry, value = expected.get(key), found.get(key)
        this_run = "not measured" if key not in found else f"{value:.3g}" if value else "none"
        seen = "–".join(f"{v:.3g}" for v in (min(entry["seen"]), max(entry["seen"]))) if entry else ""
        row = [f"{name}: {figure}", backend, f"{entry['ratio']:.3g}" if entry else "none", seen, this_run]
        where = f"{name}: {figure} [{backend}]"
        if entry is None:
            failure = (f"measured, but {reference_path.name} has no reference for it: record one "
                       "(bench/smoke_check.py --record)")
        elif key not in found:
            failure = f"not measured in this run ({missing.get(name, f'bench/{name}.py gave no such figure')})"
        elif not value or value <= 0:
            failure = "this run gave no ratio (the benchmark measured no figure or no baseline)"
        elif (name, figure) in ADVISORY:
            failure = None
        elif moved(entry["ratio"], value) > FACTOR:
            failure = (f"{value:.3g} this run against {entry['ratio']:.3g} in the reference: "
                       f"{described(entry['ratio'], value)}, more than the {FACTOR}× allowed")
        else:
            failure = None
        moved_text = described(entry["ratio"], value) if entry and value and value > 0 else ""
        verdict = "FAIL" if failure else "advisory" if (name, figure) in ADVISORY else "ok"
        rows.append([*row, moved_text, verdict])
        if failure:
            failures.append(f"{where}: {failure}")
            failed_benchmarks.add(name)
    table(f"Each figure's ratio to its same-run baseline against {shown(reference_path)} (recorded "
          f"{reference['recorded']['date']} from {reference['recorded']['runs']} runs, which saw the range shown); "
          f"a move of more than {FACTOR}× either way fails",
          ["figure", "back end", "reference", "seen", "this run", "moved", ""], rows)
    print(f"This run's results: {shown(folder)}")
    if moved_to is not None:
        moved_to.write_text("".join(f"{name}\n" for name in sorted(failed_benchmarks)))
    for failure in failures:
        print(f"FAILED: {failure}")
    if failures:
        print(f"{len(failures)} of {len(rows)} figures failed. If a change moved one on purpose, re-record the "
              "reference (bench/smoke_check.py's docstring says how).")
        return 1
    judged = sum(1 for row in rows if row[-1] == "ok")
    print(f"All {judged} judged figures are within {FACTOR}× of the reference "
          f"({len(rows) - judged} advisory, printed above, not judged).")
    return 0


def middle(values: list[float]) -> float:
    """The median, in ratios (of an even count, the geometric mean of the middle two): where most runs
    sit, with room either way, and not pulled off by a lone run far out, as the middle of the range is."""
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else math.sqrt(ordered[half - 1] * ordered[half])


def record(reference_path: Path, folders: list[Path]) -> int:
    seen: dict[tuple[str, str, str], list[float]] = {}
    documents, unrecorded = [], set()
    for folder in folders:
        results = Results("", True, folder)
        found, missing = measured(results)
        absent = [f"bench/{k[0]}.py, {k[1]}, {k[2]} has no ratio" for k, v in found.items() if not v]
        if absent:
            raise SystemExit(f"{folder} is not a complete smoke run: " + "; ".join(absent))
        unrecorded |= missing.keys()
        if len({d["run"] for d in results.documents.values()}) > 1:
            raise SystemExit(f"{folder} holds results of more than one run: record from a smoke run's folder")
        if seen and found.keys() != seen.keys():
            raise SystemExit(f"{folder} has other figures than {folders[0]}: record from runs of the same smoke")
        for key, value in found.items():
            seen.setdefault(key, []).append(value)
        documents += results.documents.values()
    figures: dict = {}
    for (name, figure, backend), values in sorted(seen.items()):
        figures.setdefault(name, {}).setdefault(figure, {})[backend] = {
            "ratio": float(f"{middle(values):.4g}"), "seen": sorted(float(f"{v:.4g}") for v in values)}
    loads = [d["machine"]["load_average"][0] for d in documents if d["machine"].get("load_average")]
    document = {
        "about": "Each `make bench-smoke` figure's ratio to its same-run baseline, as bench/smoke_check.py "
                 "computes it. Recorded with `bench/smoke_check.py --record` from the results folders of "
                 "several `make bench-smoke` runs: the reference is the median of the ratios seen. "
                 "To re-record, see bench/smoke_check.py's docstring.",
        "recorded": {
            "date": time.strftime("%Y-%m-%d"), "runs": len(folders),
            "commit": ", ".join(sorted({d.get("commit", "") for d in documents} - {""})),
            "machine": f"{documents[0]['machine']['cpus']} cores, 1-minute load average "
                       f"{min(loads, default=0):.1f}–{max(loads, default=0):.1f}",
        },
        "figures": figures,
    }
    reference_path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    for name in sorted(unrecorded):  # not silent either way: the check fails on a figure the reference lacks
        print(f"NOT RECORDED: bench/{name}.py's figures (it wrote no results in these runs)")
    print(f"wrote {reference_path}: {len(seen)} figures from {len(folders)} runs")
    for (name, figure, backend), values in sorted(seen.items()):
        # Spread past FACTOR, the next run has little room; past FACTOR², some of these very runs fail.
        if max(values) / min(values) > FACTOR:
            outside = sum(1 for v in values if moved(middle(values), v) > FACTOR)
            print(f"NOISY: {name}: {figure} [{backend}] spread {max(values) / min(values):.2f}× across these runs "
                  f"({', '.join(f'{v:.3g}' for v in values)})"
                  + (f"; {outside} of them would fail against the reference" if outside else ""))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=REFERENCE)
    parser.add_argument("--results", type=Path, default=RESULTS, help="the folder of the run to check")
    parser.add_argument("--moved-to", type=Path, metavar="FILE",
                        help="write there the benchmarks with a failing figure, one a line (bench/run.py reruns them)")
    parser.add_argument("--record", type=Path, nargs="+", metavar="DIR",
                        help="write the reference from these smoke runs' results folders instead of checking")
    args = parser.parse_args()
    if args.record:
        return record(args.reference, args.record)
    return check(args.reference, args.results, os.environ.get("BENCH_RUN", ""), args.moved_to)


if __name__ == "__main__":
    sys.exit(main())
