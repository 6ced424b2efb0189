"""The installed layout: one ``flatgate`` namespace over the folders the design fixes."""

from __future__ import annotations

import os
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


MAX_LINES = 600
# Not the project's own Python: the flatc output, the virtualenv, git's store and
# a setuptools build (which copies generated/).
NOT_OURS = {"generated", ".venv", ".git", "build"}


def _our_python_files() -> list[Path]:
    out = []
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder)
        if here == ROOT:
            dirs[:] = [d for d in dirs if d not in NOT_OURS]
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        out += [here / f for f in files if f.endswith(".py")]
    return sorted(out)


def test_no_module_is_over_600_lines() -> None:
    """Every Python file of the repo (top level, proxy/, edge_translator/,
    benchmarks/, tests/, schema/, ...) but the generated code is 600 lines at most."""
    files = _our_python_files()
    assert any(p.relative_to(ROOT).parts[0] == "tests" for p in files)
    counts = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in files}
    over = {path: n for path, n in counts.items() if n > MAX_LINES}
    listed = "\n".join(f"  {path}: {n} lines" for path, n in over.items())
    assert not over, f"modules over {MAX_LINES} lines (split them by topic):\n{listed}"


def test_no_module_imports_the_package_that_imports_it() -> None:
    """A package whose ``__init__`` re-exports its modules is not imported by
    those modules (``from <package> import x`` inside it is an import cycle
    through the package): they import each other by their full names."""
    import ast

    for folder, name in MAPPED.items():
        if folder == "generated":
            continue
        for init in (ROOT / folder).rglob("__init__.py"):
            package = ".".join((name, *init.parent.relative_to(ROOT / folder).parts))
            for path in init.parent.rglob("*.py"):
                if path == init:
                    continue
                for node in ast.walk(ast.parse(path.read_text())):
                    if isinstance(node, ast.ImportFrom) and node.module == package:
                        raise AssertionError(f"{path.relative_to(ROOT)} imports {package}")
