"""The real vLLM check's stack (``make test-vllm``): a tiny random-weight
model built by ``make_model.py``, a vLLM server on it, a recorder in front of
it (``recorder``), and one ``flatgate gateway`` whose ``openai`` backend is
that recorder. The embeddings check (``test_vllm_embeddings``) has its own:
the same model run as a pooling model by a second vLLM server, its own
recorder and gateway (``embed_stack``), started only when one of its tests
asks. The images check (``test_vllm_vision``) has one too (``vision_stack``):
a tiny random-weight LLaVA built by ``make_vision_model.py``, served by a
third vLLM through vLLM's Transformers modeling backend (``--model-impl
transformers``): vLLM's own ``llava`` module imports its Pixtral one, which
imports torchvision, and torchvision's PyPI build does not load beside the
CPU torch (it links libtorch_cuda), so it is not installed.

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

import json
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

__all__ = ["EMBED_MODEL", "MATRYOSHKA", "MAX_MODEL_LEN", "MODEL", "VISION_MODEL", "VllmStack"]

PYTHON = os.environ.get("FLATGATE_VLLM_PYTHON", "")
RECORD = os.environ.get("FLATGATE_VLLM_RECORD") == "1"
# Collected only under `make test-vllm` (see the module docstring).
collect_ignore_glob = [] if PYTHON else ["test_*.py"]

MODEL = "tiny"
# The same weights served as an embedding model (``--runner pooling``).
EMBED_MODEL = "tiny-embed"
# The sizes the embedding model says it can be cut to (``matryoshka_dimensions``
# in its config, by ``--hf-overrides``): vLLM takes ``dimensions`` of these only.
MATRYOSHKA = (32, 64)
# The vision-language model (``make_vision_model.py``).
VISION_MODEL = "tiny-vision"
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


def _common_argv(model: Path, port: int, name: str) -> list[str]:
    return [
        PYTHON,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        name,
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
    ]


def _vllm_argv(model: Path, port: int) -> list[str]:
    return [
        *_common_argv(model, port, MODEL),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ]


def _embed_argv(model: Path, port: int) -> list[str]:
    """The Llama as an embedding model: vLLM's pooling runner, the causal LM
    converted to an embedder (its default pooler: the last token's hidden
    state, normalized), and matryoshka sizes so that ``dimensions`` is taken."""
    return [
        *_common_argv(model, port, EMBED_MODEL),
        "--runner",
        "pooling",
        "--convert",
        "embed",
        "--hf-overrides",
        json.dumps({"matryoshka_dimensions": list(MATRYOSHKA)}),
    ]


def _vision_argv(model: Path, port: int) -> list[str]:
    """The LLaVA on vLLM's Transformers modeling backend (see the module
    docstring for why not vLLM's own ``llava``)."""
    return [*_common_argv(model, port, VISION_MODEL), "--model-impl", "transformers"]


_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
}


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model ``make_model.py`` builds, once for both servers."""
    model = tmp_path_factory.mktemp("model")
    subprocess.run([PYTHON, str(_HERE / "make_model.py"), str(model)], check=True, timeout=600)
    return model


@pytest.fixture(scope="session")
def vision_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The LLaVA ``make_vision_model.py`` builds."""
    model = tmp_path_factory.mktemp("vision-model")
    script = _HERE / "make_vision_model.py"
    subprocess.run([PYTHON, str(script), str(model)], check=True, timeout=600)
    return model


def _serve(name: str, argv: list[str], port: int, log: Path) -> Iterator[Server]:
    server = start(name, argv, port, log, env=_ENV, health="/health")
    try:
        server.wait_healthy(_START_SECONDS)
        yield server
    finally:
        server.stop(grace=30)


@pytest.fixture(scope="session")
def vllm_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("vllm")
    port = free_port()
    yield from _serve("vllm", _vllm_argv(tiny_model, port), port, d / "vllm.log")


@pytest.fixture(scope="session")
def embed_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A second vLLM: the same model as a pooling (embedding) model."""
    d = tmp_path_factory.mktemp("vllm-embed")
    port = free_port()
    yield from _serve("vllm-embed", _embed_argv(tiny_model, port), port, d / "vllm.log")


@pytest.fixture(scope="session")
def vision_server(vision_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A third vLLM: the vision-language model."""
    d = tmp_path_factory.mktemp("vllm-vision")
    port = free_port()
    yield from _serve("vllm-vision", _vision_argv(vision_model, port), port, d / "vllm.log")


def _stack(upstream: Server, model: str, d: Path) -> Iterator[VllmStack]:
    """A recorder in front of ``upstream`` and a gateway routing ``model`` to it."""
    with recording(upstream.port) as recorder:
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
            routes={model: "vllm"},
            edge=QUIET,
            models={model: "OpenAI"},
        )
        gateway = spawn("gateway", ["--config", config, "--workers", "1"], d)
        try:
            gateway.wait_healthy(120)
            yield VllmStack(upstream.url + "/v1", gateway.url + "/v1", recorder)
        finally:
            gateway.stop()


@pytest.fixture(scope="session")
def stack(vllm_server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmStack]:
    yield from _stack(vllm_server, MODEL, tmp_path_factory.mktemp("gateway"))


@pytest.fixture(scope="session")
def embed_stack(
    embed_server: Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmStack]:
    """The embedding vLLM behind its own recorder and gateway."""
    yield from _stack(embed_server, EMBED_MODEL, tmp_path_factory.mktemp("gateway-embed"))


@pytest.fixture(scope="session")
def vision_stack(
    vision_server: Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmStack]:
    """The vision vLLM behind its own recorder and gateway."""
    yield from _stack(vision_server, VISION_MODEL, tmp_path_factory.mktemp("gateway-vision"))


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


@pytest.fixture(scope="session")
def embeddings_capture_dir() -> Path | None:
    """Where the embeddings captures go (``FLATGATE_VLLM_RECORD=1``), emptied
    first; else ``None``. A directory of their own (``EMBEDDINGS``), so that the
    chat replay does not read them as chat captures."""
    if not RECORD:
        return None
    from tests.vllm.embedding_captures import EMBEDDINGS

    EMBEDDINGS.mkdir(parents=True, exist_ok=True)
    for old in EMBEDDINGS.iterdir():
        if old.suffix == ".json":
            old.unlink()
    return EMBEDDINGS
