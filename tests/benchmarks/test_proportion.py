"""The benchmarks' shape (issue 43): their modules import each other without
a cycle, counting imports made inside functions too; and how their size is
counted against the product's.

``code_lines`` counts the lines that are not blank, not comments and not
docstrings; ``lines_under(*folders)`` sums them. The share issue 43 asks for
(``benchmarks/`` at most a quarter of ``proxy/`` and ``edge_translator/``) is
not met yet, so it is reported, not asserted::

    python -c "from tests.benchmarks.test_proportion import share; print(share())"
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("proxy", "edge_translator")


def code_lines(source: str) -> int:
    """Lines holding a token that is not a comment, and not in a docstring."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            docstrings.update(range(body[0].lineno, (body[0].end_lineno or 0) + 1))
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT}
    skipped |= {tokenize.DEDENT, tokenize.ENDMARKER}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skipped:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def lines_under(*folders: str) -> int:
    return sum(
        code_lines(path.read_text()) for folder in folders for path in (ROOT / folder).rglob("*.py")
    )


def share() -> str:
    """The benchmarks' code lines against the product's."""
    product, benches = lines_under(*PRODUCT), lines_under("benchmarks")
    return f"benchmarks {benches} / product {product} = {benches / product:.1%}"


def test_code_lines_count_code_only() -> None:
    source = (
        '"""Doc\nstring."""\n\n# a comment\nx = (\n    1,\n)\n\n\n'
        'def f():\n    """Doc."""\n    return x\n'
    )
    assert code_lines(source) == 5


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The benchmarks modules ``path`` imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {module for module in found if module in known and module != name}


def test_no_import_cycle_among_the_benchmarks() -> None:
    paths = {_module_name(p): p for p in (ROOT / "benchmarks").rglob("*.py")}
    known = set(paths)
    # A module's package is imported before it: a package importing its own
    # module is the only edge back up that is not a cycle.
    graph = {
        name: {m for m in _imports(path, name, known) if not name.startswith(m + ".")}
        for name, path in paths.items()
    }
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                cycles.append([*trail[trail.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, cycles
