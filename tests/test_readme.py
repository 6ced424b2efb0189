"""The README's Python examples keep working: every name each one imports
exists, and the ``.fbs`` example (calling the proxy directly) runs, as
written but for the proxy's port, against a real stub and proxy.

The error table is checked against the code registry in
``tests/schema/test_names.py``.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from flatgate.proxy.wire.chunk.frames import Chunk
from tests.edge.hardening_stack import MODEL, Ports, stack_toml, start_all, stop_all
from tests.servers import Server, free_port, spawn

ROOT = Path(__file__).resolve().parent.parent
# The address the README's examples give the proxy.
README_PROXY = "http://127.0.0.1:8081"


def python_blocks() -> list[str]:
    """The README's ```python blocks, in order."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```$", text, re.M | re.S)
    assert blocks, "the README has no Python example"
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


def fbs_example() -> str:
    (block,) = [b for b in python_blocks() if "build_request" in b]
    assert README_PROXY in block
    return block


@pytest.mark.parametrize("block", python_blocks(), ids=lambda b: b.splitlines()[0][:40])
def test_every_name_a_readme_example_imports_exists(block: str) -> None:
    missing = []
    for module, name in imported(block):
        loaded = importlib.import_module(module)
        if name is not None and not hasattr(loaded, name):
            missing.append(f"{module}.{name}")
    assert missing == []


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A stub and a proxy routing the README's model to it."""
    d = tmp_path_factory.mktemp("readme")
    ports = Ports(free_port(), free_port(), free_port())
    config = d / "readme.toml"
    config.write_text(stack_toml(ports))
    args = ["--config", str(config)]
    servers = [spawn("stub", args, d, port=ports.stub), spawn("proxy", args, d, port=ports.proxy)]
    start_all(servers)
    try:
        yield servers[1]
    finally:
        stop_all(servers)


@pytest.mark.integration
def test_the_fbs_example_runs_against_a_real_proxy(proxy: Server) -> None:
    code = fbs_example().replace(README_PROXY, proxy.url)
    assert f'"{MODEL}"' in code
    printed: list[object] = []
    exec(compile(code, "README.md", "exec"), {"print": printed.append})
    assert printed and all(isinstance(c, Chunk) for c in printed)
    chunks = [c for c in printed if isinstance(c, Chunk)]
    assert "".join(c.content for c in chunks) == "hello there"
    assert chunks[-1].finish_reason and chunks[-1].error is None
