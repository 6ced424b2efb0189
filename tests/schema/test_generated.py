"""``generated/`` must be exactly what ``make generate`` makes from ``schema/``."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tree(root: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(root)): p
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_generated_is_fresh(tmp_path: Path) -> None:
    out = tmp_path / "generated"
    subprocess.run(
        [sys.executable, str(ROOT / "schema" / "generate.py"), "--out", str(out)], check=True
    )
    fresh, committed = _tree(out), _tree(ROOT / "generated")
    # Both schema files are generated from (embeddings.fbs's tables included).
    assert {
        "LLMGateway/CompletionRequest.py",
        "LLMGateway/EmbeddingRequest.py",
        "LLMGateway/EmbeddingResponse.py",
        "LLMGateway/TokenIds.py",
    } <= set(fresh)
    assert sorted(fresh) == sorted(committed), (
        "generated/ has missing or extra files: make generate"
    )
    stale = [
        name
        for name, path in fresh.items()
        if not filecmp.cmp(path, committed[name], shallow=False)
    ]
    assert stale == [], f"generated/ is stale, run make generate: {stale}"


def test_generated_imports_as_a_package() -> None:
    from flatgate.generated import gateway_pb2
    from flatgate.generated.LLMGateway import CompletionRequest

    assert hasattr(CompletionRequest, "CompletionRequestT")
    assert gateway_pb2.CompletionRequest.DESCRIPTOR.fields_by_name["model_name"].number == 3


def test_generate_is_deterministic(tmp_path: Path) -> None:
    trees = []
    for name in ("a", "b"):
        out = tmp_path / name
        subprocess.run(
            [sys.executable, str(ROOT / "schema" / "generate.py"), "--out", str(out)], check=True
        )
        trees.append({k: p.read_bytes() for k, p in _tree(out).items()})
    assert trees[0] == trees[1]


def test_generated_embeddings_import_as_a_package() -> None:
    from flatgate.generated import gateway_pb2
    from flatgate.generated.LLMGateway import EmbeddingRequest, EmbeddingResponse, TokenIds

    assert hasattr(EmbeddingRequest, "EmbeddingRequestT")
    assert hasattr(EmbeddingResponse, "EmbeddingResponseT")
    assert hasattr(TokenIds, "TokenIdsT")
    # The protobuf twins, slot for slot, their floats packed.
    request = gateway_pb2.EmbeddingRequest.DESCRIPTOR.fields_by_name
    assert (request["model_name"].number, request["tokens"].number) == (3, 5)
    values = gateway_pb2.EmbeddingResponse.DESCRIPTOR.fields_by_name["values"]
    assert values.number == 5 and values.is_packed
