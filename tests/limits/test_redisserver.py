"""The redis-server fixture fails, never skips, when there is no redis-server."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import redisserver


def test_a_missing_redis_server_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name, path=None: None)
    with pytest.raises(pytest.fail.Exception, match=r"tests/setup_tools\.sh"):
        redisserver.find_redis_server()


def test_setup_script_is_in_make_test() -> None:
    makefile = (Path(__file__).parents[2] / "Makefile").read_text()
    target = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "sh tests/setup_tools.sh" in target
    assert target.index("setup_tools") < target.index("pytest")
