"""Images per MiB (``benchmarks.load.image_rows``): the request and a tiny run.

The request's three bodies carry the same screenshots (the Messages
request's base64, the Chat request's data URLs, the edge's FlatBuffer of the
Messages request, whose images are their decoded bytes); the config gives
eight tenants their keys. The tiny run starts the stubs, nginx, the gateway
and the proxy on loopback with small screenshots, spot-checks each row,
measures each for a second and writes the result files; this checks their
shape and that every server is gone. It asserts on no figure.
"""

from __future__ import annotations

import base64
import json
import tomllib
from pathlib import Path

import msgspec
import pytest

from benchmarks.harness.servers import nginx_config
from benchmarks.load import image_bodies, image_rows
from flatgate.proxy.wire.media import sniff
from tests.benchmarks.runs import leftovers, run_bench

_PEERS = {"portkey", "portkey-anthropic", "litellm"}
_FIGURES = ("rps", "cpu_us_per_request", "cpu_us_per_mib", "p50_ms", "peak_rss_mib")


def test_bodies_carry_the_same_screenshots() -> None:
    shape = image_bodies.Shape(images=2, image_bytes=6000, text_bytes=3000)
    bodies = image_bodies.build(shape, "m-anthropic", "m-openai", "m-fbs")
    messages = msgspec.json.decode(bodies.messages)
    blocks = messages["messages"][-1]["content"]
    pngs = [base64.b64decode(b["source"]["data"]) for b in blocks if b["type"] == "image"]
    assert len(pngs) == 2 and all(sniff(p) == "image/png" for p in pngs)
    assert sum(map(len, pngs)) == bodies.image_bytes
    assert messages["model"] == "m-anthropic" and messages["stream"] is False
    chat = msgspec.json.decode(bodies.chat)
    urls = [p["image_url"]["url"] for p in chat["messages"][-1]["content"] if "image_url" in p]
    assert [base64.b64decode(u.partition(",")[2]) for u in urls] == pngs
    assert all(p in bodies.fbs for p in pngs)  # the FlatBuffer holds the bytes themselves
    assert b"m-fbs" in bodies.fbs


def test_config_keys_eight_tenants() -> None:
    ports = {"stub-anthropic": 1, "stub-openai": 2, "stub-fbs": 3}
    config = tomllib.loads(image_rows.config_text(ports))
    assert len({k["tenant"] for k in config["keys"]}) == 8
    routes = {r["model"] for r in config["routes"]}
    assert routes == {"bench-anthropic", "bench-openai", "bench-fbs"}


@pytest.mark.integration
def test_tiny_run_writes_every_row(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_bench(
        tmp_path, "benchmarks.load.image_rows", "--tiny", "--out", str(out), timeout=240.0
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / f"{image_rows.NAME}.json").read_text())
    assert doc["mode"] == "tiny" and set(doc["skipped"]) == _PEERS
    assert [m["row"] for m in doc["rows"]] == [
        r.name for r in image_rows.ROWS if r.name not in _PEERS
    ]
    for m in doc["rows"]:
        assert m["requests"] > 0 and m["errors"] == 0, m
        assert all(m[k] is not None for k in _FIGURES), m
    md = (out / f"{image_rows.NAME}.md").read_text()
    assert md == image_rows.render(doc)
    for m in doc["rows"]:
        assert f"| {m['row']} |" in md
    assert leftovers(tmp_path) == []


def test_nginx_holds_the_whole_body_in_memory(tmp_path: Path) -> None:
    conf = nginx_config(tmp_path, 18001, 18002, max_body="16m")
    assert "client_max_body_size 16m;" in conf and "client_body_buffer_size 16m;" in conf
