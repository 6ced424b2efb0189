"""The embeddings bench (``benchmarks.embeddings``), run for real on tiny answers.

Checks what it writes (a row for every format, op and size, the targets, the
report and the plot) and that every format's decode and read-one give the
same float32 values, bit for bit; never a figure's value: those depend on the
machine.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.embeddings import formats, run
from benchmarks.embeddings.report import render_markdown
from benchmarks.micro import Settings

SIZES = {"2x8": (2, 8), "4x16": (4, 16), "3x32": (3, 32)}
TINY = Settings(
    min_time=10e-6,
    max_time=0.005,
    min_rounds=3,
    warmup_time=0.001,
    gc_time=0.002,
    gc_min_ops=2,
    gc_max_ops=1000,
    alloc_time=0.001,
    alloc_min_ops=1,
    alloc_max_ops=5,
    alloc_max_records=4000,
    name="test",
)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("embeddings")
    return out, run.run(SIZES, TINY, out)


def test_writes_every_row_once(bench: tuple[Path, dict[str, Any]]) -> None:
    out, doc = bench
    assert json.loads((out / "embeddings.json").read_text(encoding="utf-8")) == doc
    keys = [(r["format"], r["op"], r["size"]) for r in doc["rows"]]
    expected = [
        (fmt, op, label)
        for fmt in formats.FORMATS
        for label, (n, d) in SIZES.items()
        for op in formats.cases(fmt, formats.make_payload(n, d))
    ]
    assert sorted(keys) == sorted(expected)
    assert len(keys) == len(set(keys))
    assert {k[1] for k in keys} == set(formats.OPS)
    # Every format but the generated FlatBuffers code (no verifier) relays.
    relays = {k[0] for k in keys if k[1] == "relay"}
    assert relays == {"json", "msgspec", "base64", "protobuf", "flatgate"}
    for r in doc["rows"]:
        for key in ("ns_per_op", "allocs_per_op", "bytes_per_op"):
            assert math.isfinite(r[key]), (r["format"], r["op"], key)
        assert r["ns_per_op"] > 0


def test_reports_the_targets(bench: tuple[Path, dict[str, Any]]) -> None:
    out, doc = bench
    assert len(doc["targets"]) == 3
    assert all(t["met"] in (True, False) for t in doc["targets"])  # each one measured
    md = (out / "embeddings.md").read_text(encoding="utf-8")
    assert md == render_markdown(doc)
    for t in doc["targets"]:
        assert t["target"] in md and t["measured"] in md
    for label in formats.LABELS.values():
        assert label in md
    assert (out / "embeddings.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("size", list(SIZES.values()), ids=list(SIZES))
def test_every_format_decodes_the_same_floats(size: tuple[int, int]) -> None:
    payload = formats.make_payload(*size)
    seen = {}
    for fmt in formats.DECODES_TO:
        ops = formats.cases(fmt, payload)
        fn, body = ops["decode"]
        got = formats.as_matrix(fmt, fn(body))
        assert got.dtype == np.float32
        seen[fmt] = got.tobytes()
        fn, body = ops["read-one"]
        one = fn(body)
        assert isinstance(one, np.ndarray) and one.dtype == np.float32
        assert one.tobytes() == payload.matrix[payload.index].tobytes(), fmt
    assert set(seen.values()) == {payload.matrix.tobytes()}


def test_check_refuses_wrong_floats() -> None:
    """The bench's own check (run before any timing) fails on a wrong decode."""
    payload = formats.make_payload(2, 8)
    wrong = formats.Payload(payload.matrix + np.float32(1))
    good = formats.cases("flatgate", payload)
    original = formats.cases

    def swapped(fmt: str, p: formats.Payload) -> dict[str, formats.Case]:
        return good if p is wrong else original(fmt, p)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(formats, "cases", swapped)
        with pytest.raises(AssertionError, match=r"flatgate .* not the payload.s floats"):
            formats.check("flatgate", wrong)
