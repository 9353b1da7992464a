"""How the SSE reader's cost grows when one large frame arrives in many small chunks.

Baseline: the same bytes fed in one chunk, measured in the same run. A reader
that re-scans or re-joins its growing buffer on every chunk is quadratic and
shows a ratio in the hundreds; a linear one stays within a small factor.

    .venv/bin/python bench/sse_reader.py [--best-of 3]
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from report import save  # noqa: E402

from interrupts.protocol.sse import SSEReader, format_frame  # noqa: E402


def feed(stream: bytes, chunk: int) -> float:
    reader = SSEReader()
    started = time.perf_counter()
    frames = []
    for start in range(0, len(stream), chunk):
        frames += reader.feed(stream[start : start + chunk])
    elapsed = time.perf_counter() - started
    assert len(frames) == 1
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--best-of", type=int, default=3,
                        help="each timing: the best of this many (more steadies a loaded machine)")
    runs = parser.parse_args().best_of
    results = {}
    for size_mib in (1, 6):
        stream = format_frame("p" * (size_mib * 1024 * 1024)).encode()
        best = dict.fromkeys((len(stream), 4096, 64), float("inf"))
        # Best of `runs`, a round of every chunk size at a time: a busy moment of a shared machine
        # slows one try of each, not every try of one.
        for _ in range(runs):
            for chunk in best:
                best[chunk] = min(best[chunk], feed(stream, chunk))
        whole = best.pop(len(stream))
        for chunk, chunked in best.items():
            print(
                f"{size_mib} MiB frame in {chunk:>4}-byte chunks: {chunked * 1000:8.1f} ms"
                f"  vs one chunk {whole * 1000:6.1f} ms  ratio {chunked / whole:6.1f}x"
            )
            results[f"{size_mib} MiB in {chunk}-byte chunks"] = {
                "chunked_ms": chunked * 1000, "one_chunk_ms": whole * 1000, "ratio": chunked / whole,
            }
    save("sse_reader", results)


if __name__ == "__main__":
    main()
