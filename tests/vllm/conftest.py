"""The real vLLM check's stack (``make test-vllm``): a tiny random-weight
model built by ``make_model.py``, a vLLM server on it, a recorder in front of
it (``recorder``), and one ``flatgate gateway`` whose ``openai`` backend is
that recorder.

vLLM runs in its own environment (``.venv/vllm``, about 3.4 GB, installed by
``make test-vllm``), whose Python ``make test-vllm`` names in
``FLATGATE_VLLM_PYTHON``. Without it these tests are not collected at all
(``collect_ignore_glob``): ``make test`` neither runs them nor counts them as
skipped. Their captures replay in ``make test``
(``tests/backends/test_vllm_fixtures.py``).

``FLATGATE_VLLM_RECORD=1`` writes the captures into
``tests/backends/fixtures/vllm/`` (replacing those there); without it they
are only compared, and nothing is written in the checkout.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from benchmarks.harness.servers import start
from tests.servers import Server, free_port, spawn
from tests.stacks import QUIET, write_stack
from tests.vllm.recorder import Recorder, recording

__all__ = ["MAX_MODEL_LEN", "MODEL", "VllmStack"]

PYTHON = os.environ.get("FLATGATE_VLLM_PYTHON", "")
RECORD = os.environ.get("FLATGATE_VLLM_RECORD") == "1"
# Collected only under `make test-vllm` (see the module docstring).
collect_ignore_glob = [] if PYTHON else ["test_*.py"]

MODEL = "tiny"
MAX_MODEL_LEN = 1024
_HERE = Path(__file__).parent
# A first start compiles nothing (--enforce-eager) but loads torch and
# vLLM on two shared cores: minutes, at worst.
_START_SECONDS = 900.0


@dataclass
class VllmStack:
    vllm: str  # vLLM's API base (…/v1), for the direct calls
    gateway: str  # the gateway's API base
    recorder: Recorder

    def client(self) -> httpx.Client:
        return httpx.Client(timeout=300, trust_env=False)


def _vllm_argv(model: Path, port: int) -> list[str]:
    return [
        PYTHON,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--dtype",
        "float32",
        "--seed",
        "0",
        # Same request, same numbers: no cached prefix changes how a prompt
        # is computed between the direct call and flatgate's.
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ]


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("vllm")
    model = d / "model"
    subprocess.run([PYTHON, str(_HERE / "make_model.py"), str(model)], check=True, timeout=600)
    port = free_port()
    env = {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
    }
    server = start("vllm", _vllm_argv(model, port), port, d / "vllm.log", env=env, health="/health")
    try:
        server.wait_healthy(_START_SECONDS)
        yield server
    finally:
        server.stop(grace=30)


@pytest.fixture(scope="session")
def stack(vllm_server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmStack]:
    d = tmp_path_factory.mktemp("gateway")
    with recording(vllm_server.port) as recorder:
        config = write_stack(
            d / "flatgate.toml",
            proxy=QUIET,
            backends={
                "vllm": {
                    "url": recorder.url + "/v1",
                    "protocol": "openai",
                    "health_path": "/health",
                    "read_timeout": 300.0,
                }
            },
            routes={MODEL: "vllm"},
            edge=QUIET,
            models={MODEL: "OpenAI"},
        )
        gateway = spawn("gateway", ["--config", config, "--workers", "1"], d)
        try:
            gateway.wait_healthy(120)
            yield VllmStack(vllm_server.url + "/v1", gateway.url + "/v1", recorder)
        finally:
            gateway.stop()


@pytest.fixture(scope="session")
def capture_dir() -> Path | None:
    """Where captures go (``FLATGATE_VLLM_RECORD=1``), emptied first; else ``None``."""
    if not RECORD:
        return None
    from tests.backends.vllm_fixtures import CAPTURES

    CAPTURES.mkdir(parents=True, exist_ok=True)
    for old in CAPTURES.iterdir():
        if old.suffix in {".json", ".sse"}:
            old.unlink()
    return CAPTURES
