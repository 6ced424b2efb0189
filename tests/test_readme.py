"""The Python examples of the README and of ``docs/`` keep working.

Every ```python block of ``README.md`` and ``docs/**/*.md``: every name it
imports exists, and a block that calls flatgate at the addresses the pages
give it (the edge on 8080, the proxy's ``.fbs`` API on 8081) runs, as written
but for those ports, against a real stub, proxy and edge. What it prints is
checked: the ``.fbs`` example's chunks spell the echo and end cleanly; any
other block prints the echo of a text it sent.

The error table is checked against the code registry in
``tests/schema/test_names.py``.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from flatgate.proxy.stub.embeddings import DEFAULT_DIMENSIONS
from flatgate.proxy.wire.chunk.frames import Chunk
from tests.edge.hardening_stack import MODEL, Ports, stack_toml, start_all, stop_all
from tests.servers import Server, free_port, spawn

ROOT = Path(__file__).resolve().parent.parent
# The addresses the pages' examples give the edge and the proxy.
PAGE_EDGE = "http://127.0.0.1:8080"
PAGE_PROXY = "http://127.0.0.1:8081"


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    code: str

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return PAGE_EDGE in self.code or PAGE_PROXY in self.code


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_blocks() -> list[Block]:
    """Every ```python block of the pages, in order."""
    blocks = []
    for page in pages():
        text = page.read_text()
        for m in re.finditer(r"^```python\n(.*?)^```$", text, re.M | re.S):
            line = text.count("\n", 0, m.start()) + 2
            blocks.append(Block(page.relative_to(ROOT).as_posix(), line, m.group(1)))
    assert any(b.page == "README.md" for b in blocks), "the README has no Python example"
    return blocks


def imported(block: str) -> Iterator[tuple[str, str | None]]:
    """(module, name) for each name the block imports (name None: ``import module``)."""
    for node in ast.walk(ast.parse(block)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            assert node.module is not None and not node.level
            for alias in node.names:
                yield node.module, alias.name


def test_the_readme_has_the_fbs_example() -> None:
    fbs = [b for b in python_blocks() if "build_request" in b.code]
    assert sum(b.page == "README.md" for b in fbs) == 1
    assert all(PAGE_PROXY in b.code for b in fbs)


@pytest.mark.parametrize("block", python_blocks(), ids=lambda b: b.name)
def test_every_name_an_example_imports_exists(block: Block) -> None:
    missing = []
    for module, name in imported(block.code):
        loaded = importlib.import_module(module)
        if name is not None and not hasattr(loaded, name) and not _submodule(module, name):
            missing.append(f"{module}.{name}")
    assert missing == []


def _submodule(module: str, name: str) -> bool:
    """Whether ``from module import name`` finds ``name`` as a submodule, as
    Python's import does when the package has no such attribute yet (``from
    google import genai`` before anything imported ``google.genai``)."""
    try:
        importlib.import_module(f"{module}.{name}")
    except ModuleNotFoundError:
        return False
    return True


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """A stub, a proxy routing the pages' model to it, and an edge in front:
    (edge, proxy)."""
    d = tmp_path_factory.mktemp("readme")
    ports = Ports(free_port(), free_port(), free_port())
    config = d / "readme.toml"
    config.write_text(stack_toml(ports))
    args = ["--config", str(config)]
    servers = [
        spawn("stub", args, d, port=ports.stub),
        spawn("proxy", args, d, port=ports.proxy),
        spawn("edge", args, d, port=ports.edge),
    ]
    start_all(servers)
    try:
        yield servers[2], servers[1]
    finally:
        stop_all(servers)


@pytest.mark.integration
# The openai SDK's Responses WebSocket (docs/api/openai-responses.md) opens its
# socket with websockets' connect() outside a with, which websockets 17 warns of.
@pytest.mark.filterwarnings(
    "ignore:connect\\(\\) must be used as a context manager:DeprecationWarning"
)
@pytest.mark.parametrize("block", [b for b in python_blocks() if b.runs], ids=lambda b: b.name)
def test_the_example_runs_against_a_real_gateway(
    block: Block, stack: tuple[Server, Server]
) -> None:
    edge, proxy = stack
    code = block.code.replace(PAGE_EDGE, edge.url).replace(PAGE_PROXY, proxy.url)
    assert f'"{MODEL}"' in code
    printed: list[object] = []
    exec(compile(code, block.name, "exec"), {"print": printed.append})
    assert printed
    if "build_request" in code:
        assert all(isinstance(c, Chunk) for c in printed)
        chunks = [c for c in printed if isinstance(c, Chunk)]
        assert "".join(c.content for c in chunks) == "hello there"
        assert chunks[-1].finish_reason and chunks[-1].error is None
    elif "embeddings.create" in code:
        # A vector's length: the stub's default dimensions, through edge and proxy.
        assert printed == [DEFAULT_DIMENSIONS]
    else:
        assert all(isinstance(p, str) and p and f'"{p}"' in code for p in printed), printed
