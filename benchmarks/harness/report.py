"""What every report is made of: Markdown tables and the figures in them.

- ``md_table(header, rows)``: a Markdown table, text columns left, figures
  right (``md_row`` one line of it); ``md_facts(pairs)``: a report's head, a
  two-column table; ``head_facts(doc)``: the facts every result document
  carries (``benchmarks.harness.results.head``: date, machine, Python,
  source, versions);
- ``num``, ``signed``, ``times``: a figure as the tables show it ("-" when
  there is none);
- ``percentile``: nearest rank; ``diff`` and ``ratio``: a row against another
  (``None`` when either side is missing).

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "diff",
    "head_facts",
    "md_facts",
    "md_row",
    "md_table",
    "num",
    "percentile",
    "ratio",
    "signed",
    "times",
]


def md_row(cells: Iterable[object]) -> str:
    return f"| {' | '.join(str(c) for c in cells)} |"


def md_facts(facts: Iterable[tuple[str, object]]) -> list[str]:
    """A report's head: a two-column table of what ran, where and when."""
    return ["| | |", "|---|---|", *(md_row(fact) for fact in facts)]


def md_table(header: Sequence[str], rows: Iterable[Iterable[object]], left: int = 1) -> list[str]:
    """A Markdown table: the first ``left`` columns aligned left, the rest right."""
    rule = "|" + "---|" * left + "---:|" * (len(header) - left)
    return [md_row(header), rule, *(md_row(r) for r in rows)]


def head_facts(doc: Mapping[str, Any]) -> list[tuple[str, object]]:
    """Date, machine, Python, source and versions of a result document."""
    where = ", ".join(x for x in (f"{doc['cpu']}, {doc['cores']} cores", doc.get("platform")) if x)
    return [
        ("date", doc["date"]),
        ("machine", where),
        ("python", doc["python"]),
        ("source", doc.get("revision", "unknown")),
        ("versions", ", ".join(f"{k} {v}" for k, v in doc["versions"].items())),
    ]


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def num(value: Any, digits: int = 0, suffix: str = "") -> str:
    """``value`` with thousands separated and ``digits`` decimals (an int as it
    is), then ``suffix``; "-" when there is none."""
    if _missing(value):
        return "-"
    if isinstance(value, int):
        return f"{value:,}{suffix}"
    return f"{value:,.{digits}f}{suffix}"


def signed(value: Any, digits: int = 1) -> str:
    """``value`` with its sign: an added figure."""
    return "-" if _missing(value) else f"{value:+,.{digits}f}"


def times(value: Any) -> str:
    """A ratio: ``1.25x``."""
    return num(value, 2, "x")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, nearest rank; NaN if empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    if not values:
        return math.nan
    ordered = sorted(values)
    # (the epsilon: 99.9 / 100 * 1000 is 999.0000000000001 in floating point)
    return ordered[max(1, math.ceil(q / 100 * len(ordered) - 1e-9)) - 1]


def diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b
