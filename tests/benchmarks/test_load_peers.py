"""The load bench's OpenAI workload and its peers, without the peers installed.

What is pinned (``benchmarks/peers/``: exact versions, LiteLLM's wheels by
hash), where the harness looks for an install and why it refuses one (wrong
versions, a nested ``@hono/node-server``, no node), the peers' configs, the
workload's bodies and config, the rows skipped with a reason when the peers
are not asked for or not there, and the report. ``setup_peers.sh`` runs only
where it can install nothing (no node, npm or Python on its PATH). Nothing is
installed, started or measured here.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import tomllib
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pytest

from benchmarks.harness.servers import closed_port, gateway_available
from benchmarks.load import openai_bodies as ob
from benchmarks.load import openai_workload as ow
from benchmarks.load import peers
from benchmarks.load.cases import CASES, ROLES
from benchmarks.load.clients import sse_text
from benchmarks.load.report_openai import render_openai, summary_table
from benchmarks.load.results import (
    Cell,
    add_comparisons,
    add_stream_comparisons,
    skipped_row,
    summarise,
)
from benchmarks.load.rows import ADAPTER_MODEL, ECHO_MODEL, STREAM_TEXT
from benchmarks.load.run import main
from flatgate.proxy.gateway.check import file_problems

PINS = peers.PINS
ROW = {r.name: r for r in ow.OPENAI_ROWS}


# what is pinned ----------------------------------------------------------------


def test_portkey_pins_are_exact_and_hold_hono_at_the_lockfiles_version() -> None:
    pins = peers.npm_pins((PINS / "portkey-packages.txt").read_text())
    assert pins["@hono/node-server"] == "1.13.5"  # 1.19.x: every stream fails (immutable)
    assert set(pins) >= {"@portkey-ai/gateway", "@hono/node-ws", "hono"}
    for version in pins.values():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), version


def test_litellm_wheels_are_pinned_by_hash_and_deps_exactly() -> None:
    hashed_text = (PINS / "litellm-hashed.txt").read_text()
    hashed = peers.pip_pins(hashed_text)
    assert set(hashed) == {"litellm", "litellm-enterprise", "litellm-proxy-extras"}
    assert hashed["litellm"] not in ("1.82.7", "1.82.8")  # the compromised releases
    assert len(re.findall(r"--hash=sha256:[0-9a-f]{64}\b", hashed_text)) == len(hashed)
    deps_text = (PINS / "litellm-deps.txt").read_text()
    deps = peers.pip_pins(deps_text)
    lines = [x for x in deps_text.splitlines() if x.strip() and not x.startswith("#")]
    assert len(deps) == len(lines)  # every line an exact pin
    assert not any(name.startswith("litellm") for name in deps)
    assert {"fastapi", "uvicorn", "openai"} <= set(deps)


def test_pin_parsers() -> None:
    assert peers.npm_pins("# c\n@a/b@1.2.3\nc@4.5.6\n") == {"@a/b": "1.2.3", "c": "4.5.6"}
    with pytest.raises(ValueError, match="name@version"):
        peers.npm_pins("nothing\n")
    text = "Foo_Bar==1.0 \\\n    --hash=sha256:ab\nx.y==2; python_version < '4'\n"
    assert peers.pip_pins(text) == {"foo-bar": "1.0", "x-y": "2"}


def test_where_the_peers_are_looked_for(tmp_path: Path) -> None:
    assert peers.peers_dir({"BENCH_PEERS_DIR": str(tmp_path)}) == tmp_path
    xdg = {"XDG_CACHE_HOME": "/c", "HOME": "/h"}
    assert peers.peers_dir(xdg) == Path("/c/flatgate-bench")
    assert peers.peers_dir({"HOME": "/h"}) == Path("/h/.cache/flatgate-bench")
    assert not peers.peers_requested(env={})
    assert not peers.peers_requested(env={"BENCH_PEERS": "0"})
    assert peers.peers_requested(env={"BENCH_PEERS": "1"})
    assert peers.peers_requested(True, env={})


# finding an install ------------------------------------------------------------


def _portkey_tree(root: Path, **versions: str) -> Path:
    pins = peers.npm_pins((PINS / "portkey-packages.txt").read_text())
    modules = root / "portkey" / "node_modules"
    for name, version in pins.items():
        (modules / name).mkdir(parents=True, exist_ok=True)
        got = versions.get(name, version)
        (modules / name / "package.json").write_text(json.dumps({"version": got}))
    entry = modules / "@portkey-ai/gateway/build/start-server.js"
    entry.parent.mkdir(parents=True)
    entry.write_text("")
    return modules


def test_find_portkey_checks_the_installed_versions(tmp_path: Path) -> None:
    assert "not installed" in str(peers.find_portkey(tmp_path))
    modules = _portkey_tree(tmp_path)
    found = peers.find_portkey(tmp_path)
    assert isinstance(found, peers.Portkey), found
    assert found.versions["@hono/node-server"] == "1.13.5"
    assert found.entry == modules / "@portkey-ai/gateway/build/start-server.js"
    # A copy of @hono/node-server nested under the gateway is the one it loads.
    nested = modules / "@portkey-ai/gateway/node_modules/@hono/node-server"
    nested.mkdir(parents=True)
    (nested / "package.json").write_text(json.dumps({"version": "1.19.9"}))
    assert "nested @hono/node-server 1.19.9" in str(peers.find_portkey(tmp_path))
    shutil.rmtree(tmp_path / "portkey")
    _portkey_tree(tmp_path, **{"@hono/node-server": "1.19.9"})
    assert "@hono/node-server is 1.19.9, pinned 1.13.5" in str(peers.find_portkey(tmp_path))


def test_find_portkey_without_node_or_when_told_absent(tmp_path: Path) -> None:
    _portkey_tree(tmp_path)
    assert peers.find_portkey(tmp_path, without=("node",)) == "node is not installed"
    assert "treated as absent" in str(peers.find_portkey(tmp_path, without=("portkey",)))


def test_vllm_router_and_what_it_imports_are_pinned_by_hash() -> None:
    text = (PINS / "vllm-router-hashed.txt").read_text()
    pins = peers.pip_pins(text)
    assert pins["vllm-router"] == "0.1.17"
    assert {"setproctitle", "aiohttp", "orjson", "uvicorn", "fastapi", "requests"} <= set(pins)
    # Every package one wheel by its hash (pip's --require-hashes mode: all or none).
    assert len(re.findall(r"--hash=sha256:[0-9a-f]{64}\b", text)) == len(pins)


def test_find_vllm_router_checks_its_own_venv(tmp_path: Path) -> None:
    assert "not installed" in str(peers.find_vllm_router(tmp_path))
    venv = tmp_path / "vllm-router" / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "vllm-router").write_text("")
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "vllm_router-0.1.16.dist-info").mkdir(parents=True)
    assert "vllm-router 0.1.16 installed, pinned 0.1.17" in str(peers.find_vllm_router(tmp_path))
    (site / "vllm_router-0.1.16.dist-info").rmdir()
    (site / "vllm_router-0.1.17.dist-info").mkdir()
    found = peers.find_vllm_router(tmp_path)
    assert found == peers.VllmRouter(venv / "bin" / "vllm-router", "0.1.17")
    assert "treated as absent" in str(peers.find_vllm_router(tmp_path, without=("vllm-router",)))
    argv = peers.vllm_router_argv(found, 18001, "http://127.0.0.1:18002", 18003)
    flags = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert flags["--host"] == flags["--prometheus-host"] == "127.0.0.1"  # loopback only
    assert flags["--worker-urls"] == "http://127.0.0.1:18002"
    assert (flags["--port"], flags["--prometheus-port"]) == ("18001", "18003")
    assert flags["--policy"] == "round_robin"


class _Health(http.server.BaseHTTPRequestHandler):
    status = 404

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/health" else 500)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("status", [200, 404])
def test_worker_problem_asks_for_what_vllm_router_waits_for(status: int) -> None:
    handler = type("Health", (_Health,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        why = peers.worker_problem(f"http://127.0.0.1:{server.server_address[1]}", seconds=5)
    finally:
        server.shutdown()
        server.server_close()
    if status == 200:
        assert why is None
    else:
        assert why is not None and "GET /health with 404" in why


def test_worker_problem_when_nothing_answers() -> None:
    with closed_port() as port:
        why = peers.worker_problem(f"http://127.0.0.1:{port}", seconds=0.2)
    assert why is not None and "does not answer GET /health" in why


def test_find_litellm_checks_its_own_venv(tmp_path: Path) -> None:
    want = peers.pip_pins((PINS / "litellm-hashed.txt").read_text())["litellm"]
    assert "not installed" in str(peers.find_litellm(tmp_path))
    venv = tmp_path / "litellm" / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "litellm").write_text("")
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "litellm-1.82.8.dist-info").mkdir(parents=True)
    assert "litellm 1.82.8 installed, pinned" in str(peers.find_litellm(tmp_path))
    (site / "litellm-1.82.8.dist-info").rmdir()
    (site / f"litellm-{want}.dist-info").mkdir()
    found = peers.find_litellm(tmp_path)
    assert found == peers.Litellm(venv / "bin" / "litellm", want)
    assert "treated as absent" in str(peers.find_litellm(tmp_path, without=("litellm",)))


# configs -----------------------------------------------------------------------


def test_litellm_config_is_its_best_case() -> None:
    stubs = {ADAPTER_MODEL: "http://127.0.0.1:1/v1", ECHO_MODEL: "http://127.0.0.1:2/v1"}
    cfg = peers.litellm_config(stubs)
    models = {m["model_name"]: m["litellm_params"] for m in cfg["model_list"]}
    assert models[ADAPTER_MODEL]["model"] == f"openai/{ADAPTER_MODEL}"
    assert models[ECHO_MODEL]["api_base"] == "http://127.0.0.1:2/v1"
    settings = cfg["litellm_settings"]
    assert settings["telemetry"] is False and settings["num_retries"] == 0
    assert settings["callbacks"] == settings["success_callback"] == []
    assert cfg["router_settings"]["num_retries"] == 0
    text = json.dumps(cfg)
    assert "database_url" not in text and "master_key" not in text
    log = peers.litellm_log_config()
    assert log["loggers"]["uvicorn.access"]["handlers"] == []
    assert peers.portkey_headers("http://127.0.0.1:3/v1") == (
        ("x-portkey-provider", "openai"),
        ("x-portkey-custom-host", "http://127.0.0.1:3/v1"),
    )
    assert "127.0.0.1" in peers.LOOPBACK_JS


def test_workload_bodies() -> None:
    body = ob.chat_body()
    assert len(body) == ob.BODY_BYTES
    doc = msgspec.json.decode(body)
    assert set(doc) == {"model", "messages", "stream"} and doc["stream"] is False
    assert doc["model"] == ADAPTER_MODEL
    assert [m["role"] for m in doc["messages"]] == ["system", "user"]
    assert len(ob.chat_body(4000)) == 4000
    stream = msgspec.json.decode(ob.stream_chat_body())
    assert stream["stream"] is True and stream["model"] == ECHO_MODEL
    assert stream["messages"][-1]["content"] == STREAM_TEXT


def test_workload_config_starts_every_flatgate_service(tmp_path: Path) -> None:
    text = ow.config_text(18001, 18002)
    doc = tomllib.loads(text)
    urls = {b["name"]: b["url"] for b in doc["backends"]}
    assert urls == {
        "canned-openai": "http://127.0.0.1:18001/v1",
        "echo-openai": "http://127.0.0.1:18002/v1",
    }
    assert all(b["protocol"] == "openai" for b in doc["backends"])
    path = tmp_path / "openai.toml"
    path.write_text(text)
    assert file_problems(path, environ={}, scope="all") == []


def test_gateway_row_only_when_its_help_works() -> None:
    def fake(code: int, out: str = "", err: str = "") -> Any:
        return lambda *a, **k: SimpleNamespace(returncode=code, stdout=out, stderr=err)

    assert gateway_available(fake(0, "usage: --interface")) == (True, "usage: --interface")
    ok, why = gateway_available(fake(2, err="x\ninvalid choice: 'gateway'"))
    assert not ok and "exited 2: invalid choice: 'gateway'" in why


def test_peer_rows_are_skipped_with_the_reason(tmp_path: Path, monkeypatch: Any) -> None:
    group = cast(Any, SimpleNamespace(workdir=tmp_path))  # never started: nothing found
    wanted = {"portkey", "litellm", "stub", "vllm-router", "vllm-router-512"}
    routers = {"vllm-router": "http://127.0.0.1:1", "vllm-router-512": "http://127.0.0.1:2"}
    off = ow.start_peers(group, ow.OPENAI_TINY, wanted, {}, routers)
    why = "peers not requested (BENCH_PEERS=1 or --peers)"
    assert off == (dict.fromkeys([*peers.PEERS, "vllm-router-512"], why), {})
    monkeypatch.setenv("BENCH_PEERS_DIR", str(tmp_path / "none"))
    on = replace(ow.OPENAI_TINY, peers=True)
    skipped, found = ow.start_peers(group, on, wanted, {}, routers)
    assert found == {}
    assert "not installed" in skipped["litellm"]
    assert "not installed" in skipped["portkey"]  # node, or the gateway
    assert "not installed" in skipped["vllm-router"] and "vllm-router-512" in skipped


def test_every_openai_case_has_a_vllm_router_of_its_own() -> None:
    cases = [c for c in CASES if c.api == "openai"]
    assert len(cases) >= 4
    servers = set()
    for case in cases:
        row = ROW[case.columns["vllm-router"]]
        assert (row.server, row.hop, row.path, row.body) == (
            row.name,
            (row.name,),
            "/v1/chat/completions",
            "openai",
        )
        servers.add(row.server)
    # One router a stub: it routes by worker, not by model.
    assert len(servers) == len({c.backend for c in cases})
    assert not any("vllm-router" in c.columns for c in CASES if c.api != "openai")
    assert ROW["vllm-router"].stream_server == "vllm-router-echo"
    assert ROLES.index("vllm-router") < ROLES.index("gateway")
    assert "vllm-router" in ow.OPENAI_FULL.versus


@pytest.mark.parametrize(
    "argv", [["--rows", "edge,nope"], ["--sizes", "16KB"], ["--rows", "proxy-rsgi"]]
)
def test_openai_workload_refuses_unknown_rows_and_sizes(argv: list[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="unknown"):
        main(["--workload", "openai", *argv, "--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())


# the setup script --------------------------------------------------------------


def test_setup_peers_installs_nothing_without_node_npm_or_python(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "cat", "grep", "tr", "mkdir", "rm", "dirname"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    script = PINS / "setup_peers.sh"
    env = {
        "PATH": str(bin_dir),
        "HOME": str(tmp_path),
        "BENCH_PEERS_DIR": str(tmp_path / "peers"),
        "BENCH_PEERS_PYTHON": "no-such-python-flatgate",
    }
    done = subprocess.run(
        [str(bin_dir / "sh"), str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "node or npm is missing: the portkey row will be skipped" in done.stderr
    assert "no-such-python-flatgate is missing: the litellm row will be skipped" in done.stderr
    assert "no-such-python-flatgate is missing: the vllm-router row will be skipped" in done.stderr
    assert sorted(os.listdir(tmp_path / "peers")) == []


# results and report ------------------------------------------------------------


def _row(name: str, rps: float, cpu: float, lat: float) -> dict[str, Any]:
    cell = Cell(rps=[rps], requests=int(rps), latencies=[[lat] * 50], unloaded=[lat], rate=50.0)
    cell.cpu_seconds = {"stub": 0.01} if name == "direct-openai" else {name: cpu, "stub": 0.01}
    return summarise(ROW[name], ow.SIZE, cell, ob.BODY_BYTES)


def test_report_has_the_peer_ratios(tmp_path: Path) -> None:
    rows = [
        _row("direct-openai", 20000.0, 0.0, 0.0005),
        _row("edge", 3000.0, 1.0, 0.002),
        _row("portkey", 1000.0, 2.0, 0.003),
        _row("litellm", 250.0, 1.5, 0.007),
        _row("vllm-router", 15000.0, 0.75, 0.0006),
        skipped_row("gateway", "not available yet", ow.SIZE),
    ]
    add_comparisons(rows, "direct-openai", peers.PEERS)
    edge = rows[1]
    assert edge["vs_portkey"] == pytest.approx(3.0)
    assert edge["vs_litellm"] == pytest.approx(12.0)
    assert edge["vs_vllm_router"] == pytest.approx(0.2)
    assert edge["cpu_vs_vllm_router"] == pytest.approx((1.0 / 3000) / (0.75 / 15000))
    # CPU per request: edge 1.0/3000 s against portkey's 2.0/1000 s.
    assert edge["cpu_vs_portkey"] == pytest.approx((1.0 / 3000) / (2.0 / 1000))
    assert rows[0]["cpu_vs_portkey"] is None  # the floor has no server of its own
    streams: list[dict[str, Any]] = [
        {"row": "direct-openai", "status": "ok", "ttft_ms_p50": 21.0, "tpot_ms_mean": 2.0},
        {"row": "portkey", "status": "ok", "ttft_ms_p50": 50.0, "tpot_ms_mean": 2.1},
        {"row": "litellm", "status": "skipped", "reason": "not installed"},
    ]
    streams[0].update(stream_ms_p50=90.0, stream_ms_p99=95.0, streams=10)
    streams[1].update(stream_ms_p50=120.0, stream_ms_p99=140.0, streams=10)
    add_stream_comparisons(streams, "direct-openai", peers.PEERS)
    assert streams[0]["stream_vs_portkey"] == pytest.approx(0.75)
    assert streams[1]["added_stream_ms"] == pytest.approx(30.0)
    assert "stream_vs_litellm" not in streams[0]
    doc = {
        **ow.header(ow.OPENAI_TINY),
        "rows": rows,
        "streaming": streams,
        "elapsed_seconds": 1.0,
    }
    md = render_openai(doc)
    src = tmp_path / "in.json"
    src.write_text(json.dumps(doc))
    assert main(["--from-json", str(src), "--out", str(tmp_path / "out"), "--no-plot"]) == 0
    assert (tmp_path / "out" / "load-openai.md").read_text() == md + "\n"
    assert "| vs. portkey | vs. litellm | vs. vllm-router |" in md
    assert "| CPU vs. portkey | CPU vs. litellm | CPU vs. vllm-router |" in md
    assert "| edge | 3,000 | 0.15x | 3.00x | 12.00x | 0.20x |" in md
    assert "| vllm-router | 15,000 | 0.75x | 15.00x | 60.00x | 1.00x |" in md
    # The summary: a vllm-router column and the gateway's ratio against it.
    head = summary_table(doc)[0]
    assert "| nginx | vllm-router | Portkey | LiteLLM | flatgate gateway |" in head
    assert head.endswith("| gateway vs. Portkey | gateway vs. vllm-router | gateway vs. nginx |")
    assert "| gateway | skipped: not available yet |" in md
    assert "| litellm | n/a: not installed |" in md
    assert "peers not requested" in md


def test_sse_text_joins_the_deltas() -> None:
    chunk = {"choices": [{"delta": {"content": "a "}}]}
    data = f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
    assert sse_text(data.encode()) == "a a "
