"""What the lifecycle tests share: a stub that streams slowly and drains at once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.servers import Server, running
from tests.stacks import write_stack

__all__ = ["slow_stub"]


@pytest.fixture(scope="module")
def slow_stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """250 ms between tokens (a 21-word answer takes 5 s); its own drain: none
    to speak of."""
    cfg = write_stack(
        tmp_path_factory.mktemp("stub-cfg") / "s.toml",
        stub={"drain_grace_seconds": 0, "drain_seconds": 1},
        backends={"x": "http://127.0.0.1:1"},
        routes={"*": "x"},
    )
    args = ["--itl-ms", "250", "--config", cfg]
    with running("stub", args, tmp_path_factory.mktemp("slow-stub")) as s:
        yield s
