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
