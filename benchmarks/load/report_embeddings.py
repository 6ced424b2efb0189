"""The embeddings workload's report: ``load-embeddings.md``.

Renders one result document of ``--workload embeddings``
(``benchmarks.load.embeddings_workload``): the header, the issue's target
line (the proxy's user CPU per request relayed untouched, 64 x 1536 over
1 x 1536, "met" or "missed"), then one table per case: throughput at
saturation and against the direct fbs row and nginx, CPU and user CPU per
request of the row's servers, peak RSS, and the unloaded p50. Pure; never
asserts on figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness.plot import pyplot, save_figure
from benchmarks.harness.report import head_facts, md_facts, md_table, num, times
from benchmarks.load.embeddings_workload import CASES, EmbeddingsTarget, targets, with_hops
from benchmarks.load.report import hop_cpu, hop_rss, row_label
from benchmarks.load.results import ratio_key

__all__ = ["plot_embeddings", "prepare", "render_embeddings", "target_line", "target_records"]

_COLUMNS = [
    "Row",
    "What",
    "Throughput (req/s)",
    "vs. direct-fbs",
    "vs. nginx-fbs",
    "CPU (µs/req)",
    "user CPU (µs/req)",
    "Peak RSS (MiB)",
    "Unloaded p50 (ms)",
]


def target_line(t: EmbeddingsTarget) -> str:
    """The target as one line: its ratio, the bound, met or missed."""
    verdict = {True: "met", False: "missed", None: "not measured"}[t.met]
    figures = ", ".join(f"{k} {num(v, 0)}" for k, v in t.inputs.items())
    return f"**Target:** {t.name}: {times(t.value)} ({figures}), at most {t.bound}x: {verdict}."


def prepare(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The result document as it is written: each row with its hop servers and
    user CPU per request (``with_hops``), and the target (``target_records``)."""
    rows = with_hops(doc["rows"])
    return {**doc, "rows": rows, "targets": target_records(rows)}


def target_records(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The target as the result document keeps it (``rows`` with their hops)."""
    return [
        {"name": t.name, "ratio": t.value, "bound": t.bound, "at_most": True, "met": t.met}
        | {"inputs": t.inputs}
        for t in targets(rows)
    ]


def _case_table(rows: Sequence[Mapping[str, Any]], size: str) -> list[str]:
    lines = []
    for r in rows:
        if r.get("size") != size:
            continue
        if r.get("status") != "ok":
            lines.append([r["row"], f"skipped: {r.get('reason', '')}", *[""] * 7])
            continue
        cpu, hop = hop_cpu(r)
        lines.append(
            [
                row_label(r),
                r.get("note", ""),
                num(r.get("throughput_rps"), 0),
                times(r.get("vs_direct")),
                times(r.get(ratio_key("nginx-fbs"))),
                cpu,
                num(r.get("hop_user_cpu_us_per_req"), 0),
                hop_rss(r, hop),
                num(r.get("unloaded_p50_ms"), 2),
            ]
        )
    return md_table(_COLUMNS, lines, left=2)


def render_embeddings(doc: Mapping[str, Any]) -> str:
    """``load-embeddings.md`` from a result document."""
    rows = with_hops(doc["rows"])
    out = [
        f"# Load bench: embeddings ({doc.get('mode', 'full')} mode)",
        "",
        *md_facts(head_facts(doc)),
        "",
        doc.get("method", ""),
        "",
    ]
    out += [target_line(t) for t in targets(rows)]
    for size, count in CASES.items():
        out += ["", f"## {size}: {count} input(s), {size.split('x')[1]} dimensions", ""]
        out += _case_table(rows, size)
    out += [
        "",
        "CPU: the row's servers (the edge row: edge and its proxy together; a direct row: "
        "the stub). User CPU: the same less the kernel's share (stime), what the "
        "target compares. Throughput is the best round; CPU is over every round.",
    ]
    return "\n".join(out)


def plot_embeddings(doc: Mapping[str, Any], path: Path) -> None:
    """``load-embeddings.png``: throughput and user CPU per request, a bar per
    row and case (a skipped row: no bar)."""
    plt = pyplot()
    rows = with_hops(doc["rows"])
    names = list(dict.fromkeys(r["row"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / len(CASES)
    for i, size in enumerate(CASES):
        got = {r["row"]: r for r in rows if r.get("size") == size and r.get("status") == "ok"}
        xs = [k + (i - (len(CASES) - 1) / 2) * width for k in range(len(names))]
        for ax, key in zip(axes, ("throughput_rps", "hop_user_cpu_us_per_req"), strict=True):
            ax.bar(
                xs, [(got[n].get(key) or 0) if n in got else 0 for n in names], width, label=size
            )
    titles = ("Throughput at saturation (req/s)", "User CPU per request (µs; direct: the stub's)")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=35, ha="right")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"flatgate load bench, embeddings, {doc['date']}, {doc['cpu']}", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
