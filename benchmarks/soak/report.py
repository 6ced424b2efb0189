"""The soak test's verdict and report: ``soak.json``, ``soak.md`` and ``soak.png``.

Owns the pass condition over one result document (``benchmarks.soak.run.run``),
as ``Check`` rows, each PASS, FAIL or SKIP:

- accounting: every request was sent; the outcome buckets add up to the
  requests sent; none is undefined (``traffic.UNDEFINED``); the edge's
  own count of completions (its ``/metrics``) equals the requests sent; the
  backend restart happened and the stub came back;
- flat after warm-up, in each epoch of the run: before the restart and
  after it (the samples taken while the stub is down belong to neither). A
  restart moves the pools once: the connections to the stopped stub close,
  the traffic it does not take opens more elsewhere; and the stub begins a
  second life. The first ``warmup`` share of an epoch's samples is its
  warm-up; with fewer than three samples left, SKIP. The resident set grows
  by at most ``max(10 MiB, 10%)`` from the median of the first three samples
  to the median of the last three; open descriptors and the upstream pool's
  open connections end (the median of the last three samples) no higher than
  the largest of the first third of the samples, times 1.1, plus a slack of
  ``concurrency / 4 + 4``; requests in flight, active streams and pool
  waiters stay within the client's concurrency plus that slack;
- drained: once the traffic has ended, nothing is in flight, streaming or
  waiting anywhere.

``checks`` and ``render_markdown`` are pure; ``plot`` (the samples against
time, ``benchmarks.harness.plot.timeseries``) and ``write_results`` write
files. Figures are reported, not asserted on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.harness.plot import Panel, Series, timeseries
from benchmarks.harness.report import head_facts, md_facts, md_table
from benchmarks.harness.results import write_results as _write
from benchmarks.soak.traffic import is_defined

__all__ = [
    "Check",
    "after_warmup",
    "as_rows",
    "checks",
    "epochs",
    "not_rising",
    "plot",
    "render_markdown",
    "rss_flat",
    "slack",
    "verdict",
    "write_results",
]

T = TypeVar("T")
_MIB = 1024
RSS_GROWTH_KIB = 10 * _MIB
RSS_GROWTH_SHARE = 0.10
TREND_FACTOR = 1.1
# Gauges that must stay within the client's concurrency (plus slack).
BOUNDED = ("in_flight", "active_streams", "pool_waiting")


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    verdict: str  # "PASS", "FAIL" or "SKIP"
    detail: str


def _ok(cond: bool) -> str:
    return "PASS" if cond else "FAIL"


def verdict(rows: Iterable[Check]) -> str:
    """``FAIL`` if any check failed, else ``PASS``."""
    return "FAIL" if any(c.verdict == "FAIL" for c in rows) else "PASS"


def slack(concurrency: int) -> int:
    return concurrency // 4 + 4


# Accounting ---------------------------------------------------------------------


def _accounting(doc: Mapping[str, Any]) -> list[Check]:
    requested, sent = doc["settings"]["requests"], doc["sent"]
    outcomes: Mapping[str, int] = doc["outcomes"]
    total = sum(outcomes.values())
    bad = {k: v for k, v in outcomes.items() if v and not is_defined(k)}
    rows = [
        Check("every request sent", _ok(sent == requested), f"{sent:,} of {requested:,}"),
        Check(
            "outcomes add up",
            _ok(total == sent),
            " + ".join(f"{k} {v:,}" for k, v in sorted(outcomes.items())) + f" = {total:,}",
        ),
        Check(
            "every outcome defined",
            _ok(not bad),
            "none undefined" if not bad else ", ".join(f"{k} {v:,}" for k, v in bad.items()),
        ),
    ]
    edge = doc.get("edge_requests")
    if edge is None:
        rows.append(Check("the edge counted every request", "SKIP", "no edge request counter"))
    else:
        counted = sum(edge.values())
        by = ", ".join(f"{s}: {n:,}" for s, n in sorted(edge.items()))
        rows.append(
            Check(
                "the edge counted every request",
                _ok(counted == sent),
                f"{counted:,} counted ({by})",
            )
        )
    restart = doc.get("restart") or {}
    if not restart.get("wanted", True):
        rows.append(Check("backend restarted", "SKIP", "no restart asked for"))
    else:
        happened = bool(restart.get("ok"))
        detail = (
            f"at request {restart['at_request']:,}, t={restart['t']:.1f} s, "
            f"down {restart['down_seconds']:.1f} s"
            if happened
            else restart.get("error") or "never triggered"
        )
        rows.append(Check("backend restarted", _ok(happened), detail))
    return rows


# Flatness -----------------------------------------------------------------------


def _value(usage: Mapping[str, Any], key: str) -> float:
    if key in ("rss_kib", "fds"):
        return float(usage[key])
    return float(usage["gauges"].get(key, 0.0))


def epochs(
    samples: Sequence[Mapping[str, Any]], service: str
) -> dict[int, list[Mapping[str, Any]]]:
    """``service``'s readings in the traffic samples, by epoch."""
    out: dict[int, list[Mapping[str, Any]]] = {}
    for s in samples:
        usage = s["services"].get(service)
        if s["phase"] == "traffic" and usage is not None:
            out.setdefault(int(s["epoch"]), []).append(usage)
    return out


_EPOCHS = {1: "before the restart", 2: "after the restart"}


def after_warmup(values: Sequence[T], warmup: float) -> list[T]:
    """``values`` without the first ``warmup`` share (at least one dropped)."""
    drop = max(1, math.ceil(len(values) * warmup))
    return list(values[drop:])


def rss_flat(values_kib: Sequence[float]) -> tuple[bool, str]:
    k = min(3, len(values_kib))
    first = statistics.median(values_kib[:k])
    last = statistics.median(values_kib[-k:])
    limit = max(RSS_GROWTH_KIB, RSS_GROWTH_SHARE * first)
    growth = last - first
    detail = (
        f"{first / _MIB:.1f} -> {last / _MIB:.1f} MiB ({growth / _MIB:+.1f}, "
        f"limit +{limit / _MIB:.1f})"
    )
    return growth <= limit, detail


def not_rising(values: Sequence[float], extra: float) -> tuple[bool, str]:
    """The end (the median of the last three values, so that one spike does not
    decide) against the largest value of the first third."""
    start = max(values[: max(1, len(values) // 3)])
    end = statistics.median(values[-min(3, len(values)) :])
    limit = start * TREND_FACTOR + extra
    return end <= limit, f"first third max {start:.0f}, end {end:.0f} (limit {limit:.0f})"


def _flatness(doc: Mapping[str, Any]) -> list[Check]:
    settings = doc["settings"]
    warmup, extra = settings["warmup_fraction"], slack(settings["concurrency"])
    bound = settings["concurrency"] + extra
    rows: list[Check] = []
    for service in doc["services"]:
        by_epoch = epochs(doc["samples"], service)
        began = "t" in (doc.get("restart") or {})  # the restart began: a second epoch
        for epoch in (1, 2) if began else (1,):
            who = f"{service} ({_EPOCHS[epoch]})" if began else service
            post = after_warmup(by_epoch.get(epoch, []), warmup)
            if len(post) < 3:
                why = f"{len(post)} samples after warm-up (3 needed)"
                rows.append(Check(f"flat: {who}", "SKIP", why))
                continue
            ok, detail = rss_flat([_value(u, "rss_kib") for u in post])
            rows.append(Check(f"RSS flat: {who}", _ok(ok), detail))
            ok, detail = not_rising([_value(u, "fds") for u in post], extra)
            rows.append(Check(f"FDs flat: {who}", _ok(ok), detail))
            if "pool_open" in post[0]["gauges"]:
                ok, detail = not_rising([_value(u, "pool_open") for u in post], extra)
                rows.append(Check(f"pool flat: {who}", _ok(ok), "open connections " + detail))
            highs = {
                key: max(_value(u, key) for u in post)
                for key in BOUNDED
                if key in post[0]["gauges"]
            }
            ok = all(v <= bound for v in highs.values())
            detail = ", ".join(f"{k} max {v:.0f}" for k, v in highs.items()) + f" (limit {bound})"
            rows.append(Check(f"in flight bounded: {who}", _ok(ok), detail))
    return rows


def _drained(doc: Mapping[str, Any]) -> Check:
    after = [s for s in doc["samples"] if s["phase"] == "after"]
    if not after:
        return Check("drained after the traffic", "FAIL", "no sample after the traffic")
    left = {
        f"{name} {key}": value
        for name, usage in after[-1]["services"].items()
        for key, value in usage["gauges"].items()
        if key in BOUNDED and value
    }
    detail = "nothing in flight, streaming or waiting"
    if left:
        detail = ", ".join(f"{k} {v:.0f}" for k, v in left.items())
    return Check("drained after the traffic", _ok(not left), detail)


def checks(doc: Mapping[str, Any]) -> list[Check]:
    """Every criterion of the pass condition (see the module docstring)."""
    return [*_accounting(doc), *_flatness(doc), _drained(doc)]


# Report -------------------------------------------------------------------------


def _pct(n: int, total: int) -> str:
    return f"{100 * n / total:.1f}%" if total else "-"


def render_markdown(doc: Mapping[str, Any]) -> str:
    s = doc["settings"]
    rows = [Check(**c) for c in doc["checks"]]
    rate = doc["sent"] / max(doc["elapsed_seconds"], 1e-9)
    lines = [
        "# Soak test: edge + proxy under mixed traffic, with a backend restart",
        "",
        *md_facts(
            [
                *head_facts(doc),
                ("requests", f"{s['requests']:,}, {s['concurrency']} at a time"),
                ("took", f"{doc['elapsed_seconds']:.0f} s ({rate:,.0f} requests/s)"),
                ("sampled", f"every {s['sample_seconds']} s, warm-up {s['warmup_fraction']:.0%}"),
            ]
        ),
        "",
        f"**Verdict: {doc['verdict']}**",
        "",
        *md_table(
            ["criterion", "verdict", "detail"],
            [(c.name, c.verdict, c.detail) for c in rows],
            left=3,
        ),
        "",
        "## Outcomes",
        "",
    ]
    outcomes: Mapping[str, int] = doc["outcomes"]
    total = sum(outcomes.values())
    lines += md_table(
        ["outcome", "defined", "requests", "share"],
        [
            (k, "yes" if is_defined(k) else "**no**", f"{v:,}", _pct(v, total))
            for k, v in sorted(outcomes.items(), key=lambda kv: -kv[1])
        ],
        left=2,
    )
    lines += ["", "By kind of request (the expected outcome, and every other one it got):", ""]
    expect = {m["kind"]: m["expect"] for m in doc["mix"]}
    kind_rows = []
    for kind, got in doc["by_kind"].items():
        n = sum(got.values())
        others = ", ".join(f"{k} {v:,}" for k, v in got.items() if k != expect[kind]) or "-"
        kind_rows.append((kind, expect[kind], others, f"{n:,}", _pct(got.get(expect[kind], 0), n)))
    lines += md_table(["kind", "expected", "otherwise", "sent", "as expected"], kind_rows, left=3)
    for bucket, examples in (doc.get("undefined_examples") or {}).items():
        lines += ["", f"Examples of `{bucket}`:", "", *(f"- {e}" for e in examples)]
    lines += ["", "## Samples", "", "![RSS, descriptors and pools over time](soak.png)", ""]
    services = list(doc["services"])
    header = ["t (s)", "phase", "done"]
    for name in services:
        header += [f"{name} RSS (MiB)", f"{name} FDs"]
    header += ["edge pool open/idle", "proxy pool open/idle"]
    table = []
    for sample in doc["samples"]:
        row: list[object] = [f"{sample['t']:.0f}", sample["phase"], f"{sample['finished']:,}"]
        for name in services:
            u = sample["services"].get(name)
            row += [f"{u['rss_kib'] / _MIB:.1f}", u["fds"]] if u else ["-", "-"]
        for name in ("edge", "proxy"):
            u = sample["services"].get(name)
            g = u["gauges"] if u else {}
            row.append(f"{g.get('pool_open', 0):.0f}/{g.get('pool_idle', 0):.0f}" if u else "-")
        table.append(row)
    lines += md_table(header, table, left=2)
    if doc.get("absent_gauges"):
        lines += ["", "Not exported (recorded as 0): " + ", ".join(doc["absent_gauges"]) + "."]
    lines += ["", "## Method", "", doc["method"], "", CAVEATS]
    return "\n".join(lines) + "\n"


CAVEATS = """\
**Caveats.** The client, the edge, the proxy and both stubs share one small
machine, so the rate is whatever is left over and a busy neighbour moves it;
nothing here is a throughput figure. RSS is the whole process tree's
(granian's main process and its worker), read from `/proc` every few seconds:
a leak slower than the run's length, or one that the allocator hides by
reusing freed pages, would not show. Pool sizes and requests in flight are
instantaneous gauges read between requests, not maxima. The restart is the
stub's own graceful stop (SIGTERM, a short drain, SIGKILL if it lingers):
the requests caught by it get 502 or an error event, which are defined
outcomes; a crash that leaves half-open connections is not exercised."""


def plot(doc: Mapping[str, Any], path: Path) -> None:
    """RSS, descriptors and pool sizes of every server against time, as a PNG."""
    samples = [s for s in doc["samples"] if s["phase"] != "after"]

    def series(service: str, key: str, label: str) -> Series:
        scale = _MIB if key == "rss_kib" else 1
        points = [
            (
                float(s["t"]),
                _value(s["services"][service], key) / scale
                if service in s["services"]
                else math.nan,  # not running: a gap in the line
            )
            for s in samples
        ]
        return Series(label, points)

    services = list(doc["services"])
    pools = [
        series(name, key, f"{name} {key.replace('_', ' ')}")
        for name in ("edge", "proxy")
        for key in ("pool_open", "in_flight")
    ]
    markers = []
    restart = doc.get("restart") or {}
    if restart.get("ok"):
        markers.append((float(restart["t"]), "stub restarted"))
    shades = []
    warmup = doc["settings"]["warmup_fraction"]
    for epoch in sorted({s["epoch"] for s in samples if s["phase"] == "traffic"}):
        times = [float(s["t"]) for s in samples if (s["phase"], s["epoch"]) == ("traffic", epoch)]
        cut = times[min(len(times) - 1, max(1, math.ceil(len(times) * warmup)))]
        shades.append((times[0], cut, "warm-up"))
    timeseries(
        [
            Panel("RSS (MiB, process tree)", [series(n, "rss_kib", n) for n in services]),
            Panel("Open file descriptors (process tree)", [series(n, "fds", n) for n in services]),
            Panel("Upstream pools and requests in flight", pools),
        ],
        path,
        title=f"Soak: {doc['sent']:,} requests, verdict {doc['verdict']}",
        x_label="seconds since the traffic began",
        markers=markers,
        shades=shades,
    )


def write_results(doc: dict[str, Any], out: Path) -> list[Path]:
    """``soak.json``, ``soak.md`` and ``soak.png`` in ``out`` (created)."""
    return _write(out, "soak", doc, render_markdown(doc), lambda path: plot(doc, path))


def as_rows(rows: Iterable[Check]) -> list[dict[str, str]]:
    return [asdict(c) for c in rows]
