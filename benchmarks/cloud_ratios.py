"""Issue 39's adapter ratios, side by side in one process: each cloud
adapter's adapt-request and adapt-chunk against the adapters it is held to.

``make bench``'s micro rows (``benchmarks.micro``) measure each format in a
fresh process, one after the other: on a shared machine a neighbour's load
can land on one format's minute and not another's, and a ratio of two rows
moves with it. Here every op of the five adapter codecs
(``micro_report.CLOUD_REFS``: the Bedrock Converse and InvokeModel rows and
the Azure OpenAI row, and the openai and anthropic adapters they are held
to) runs in one process, in interleaved rounds, and each op's figure is
its fastest round, so that load hits every row alike. Prints one markdown
table per op: the time per call at each prompt size and each cloud row's
ratio to each of its references, met or missed against
``micro_report.CLOUD_TARGET`` (1.3x).

    python -m benchmarks.cloud_ratios [--sizes 1KB,16KB] [--rounds 15]

Reports figures; asserts nothing. No I/O but the printing.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.codecs import LABELS, load, operation
from benchmarks.harness.report import md_table
from benchmarks.micro_report import CLOUD_REFS, CLOUD_TARGET
from benchmarks.payloads import PROMPT_SIZES, make_request

__all__ = ["FORMATS", "OPS", "main", "measure", "report"]

FORMATS = ("openai-adapter", "anthropic-adapter", *CLOUD_REFS)
OPS = ("adapt-request", "adapt-chunk")
# Roughly 5 ms a round for each op: calls per round at a prompt size.
_REQUEST_CALLS = {"1KB": 300, "16KB": 150, "128KB": 30, "1MB": 5}
_CHUNK_CALLS = 2000


def _calls(op: str, size: str) -> int:
    return _CHUNK_CALLS if op == "adapt-chunk" else _REQUEST_CALLS.get(size, 5)


def measure(sizes: Sequence[str], rounds: int) -> dict[tuple[str, str, str], float]:
    """Fastest round's seconds per call, by ``(format, op, size)``."""
    best: dict[tuple[str, str, str], float] = {}
    for size in sizes:
        request = make_request(PROMPT_SIZES[size], 0)
        ops: dict[tuple[str, str, str], tuple[Callable[[Any], object], object]] = {}
        for fmt in FORMATS:
            codec = load(fmt)
            args = codec.inputs(request)
            for op in OPS:
                ops[(fmt, op, size)] = (operation(codec, op), args[op])
        for key in ops:
            best[key] = float("inf")
        for _ in range(rounds):
            for key, (fn, arg) in ops.items():
                n = _calls(key[1], size)
                start = time.perf_counter()
                for _ in range(n):
                    fn(arg)
                best[key] = min(best[key], (time.perf_counter() - start) / n)
    return best


def report(best: dict[tuple[str, str, str], float], sizes: Sequence[str]) -> str:
    """One table per op: each format's µs per call, each cloud row's ratios."""
    out: list[str] = []
    for op in OPS:
        head = ["format", *(f"µs/call, {s}" for s in sizes), "ratio to (at each size)", ""]
        rows = []
        for fmt in FORMATS:
            times = [f"{best[(fmt, op, s)] * 1e6:.2f}" for s in sizes]
            ratios, worst = [], 0.0
            for ref in CLOUD_REFS.get(fmt, ()):
                each = [best[(fmt, op, s)] / best[(ref, op, s)] for s in sizes]
                worst = max(worst, *each)
                ratios.append(f"{LABELS[ref]}: " + " / ".join(f"{r:.2f}x" for r in each))
            verdict = "" if not ratios else "met" if worst <= CLOUD_TARGET else "**missed**"
            rows.append([LABELS[fmt], *times, "; ".join(ratios), verdict])
        out += [f"{op} (at most {CLOUD_TARGET}x)", "", *md_table(head, rows), ""]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cloud_ratios", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--sizes", default=",".join(PROMPT_SIZES))
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in PROMPT_SIZES]
    if unknown:
        parser.error(f"unknown sizes: {', '.join(unknown)}; known: {', '.join(PROMPT_SIZES)}")
    print(report(measure(sizes, args.rounds), sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
