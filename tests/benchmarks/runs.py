"""Running a bench for real, in a subprocess, and finding what it left behind.

``bench_env``: this environment without ``FLATGATE_*`` and ``BENCH_*``, with
``TMPDIR`` set to the test's directory (the bench's work directory lands
there, and every server it starts inherits it); ``run_bench``: ``python -m
<module> <args>`` from the repository in that environment; ``leftovers``:
the live processes started under that ``TMPDIR`` or naming it (nginx's
config), which must be none once a bench has ended.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["ROOT", "bench_env", "leftover_pids", "leftovers", "run_bench"]

ROOT = Path(__file__).resolve().parents[2]


def bench_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLATGATE_", "BENCH_"))}
    env["TMPDIR"] = str(tmp_path)
    return env


def run_bench(
    tmp_path: Path, module: str, *args: str, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=bench_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def leftover_pids(mark: Path) -> dict[int, str]:
    """Live processes (but this one) whose ``TMPDIR`` is ``mark`` or whose
    command line names it, by PID, with their command lines."""
    needle = str(mark).encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in cmd or b"TMPDIR=" + needle + b"\0" in environ:
            found[int(entry)] = cmd.replace(b"\0", b" ").decode(errors="replace")
    return found


def leftovers(mark: Path) -> list[str]:
    return list(leftover_pids(mark).values())
