"""The harnesses these tests run write only under pytest's temporary directory.

Results go where each test says (its ``tmp_path``); scratch files (memray
captures, the micro workers' rows, server logs) go to a session directory set
as ``tempfile.tempdir`` and ``TMPDIR``, which subprocesses inherit. Nothing is
written in the tree, so ``git status`` stays clean after a run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("scratch")
    patch = pytest.MonkeyPatch()
    patch.setattr(tempfile, "tempdir", str(path))
    patch.setenv("TMPDIR", str(path))
    yield path
    patch.undo()
