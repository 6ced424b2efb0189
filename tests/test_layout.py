"""The installed layout: one ``flatgate`` namespace over the folders the design fixes."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPED = {"proxy": "flatgate.proxy", "edge_translator": "flatgate.edge_translator"}
MAPPED["generated"] = "flatgate.generated"


def _packages_on_disk() -> set[str]:
    out = set()
    for folder, name in MAPPED.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            out.add(".".join((name, *rel.parts)))
    return out


def test_every_package_folder_is_installed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(config["packages"]) == _packages_on_disk()
    assert config["package-dir"] == {name: folder for folder, name in MAPPED.items()}


def test_nothing_imports_the_folders_by_their_bare_names(tmp_path: Path) -> None:
    """Every module imports from a directory where ``proxy`` & co. are not on the
    path, and no top-level ``proxy``, ``edge_translator`` or ``generated`` appears."""
    modules = []
    for folder, name in MAPPED.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            modules.append(".".join((name, *parts)))
    script = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "from flatgate.proxy.plumbing.config import read_config_text\n"
        "assert read_config_text(None)\n"
        "stray = sorted(n for n in sys.modules if n.split('.')[0] in "
        f"{sorted(MAPPED)!r})\n"
        "assert not stray, stray\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
