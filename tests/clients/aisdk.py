"""Running Vercel's AI SDK (``aisdk_run.mjs``, pinned in ``tests/clients/aisdk``
and installed by ``make clients`` into ``.venv/clients/aisdk``) for the AI SDK
tests: one node process runs every provider-to-protocol case of a spec and
prints one JSON report."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from tests.clients.conftest import ROOT

MODULES = ROOT / ".venv" / "clients" / "aisdk"
SCRIPT = ROOT / "tests" / "clients" / "aisdk_run.mjs"
KEY = "sk-flatgate-acme"
PROVIDERS = ("openai", "openai-chat", "openai-compatible", "anthropic")


def run_id(provider: str, protocol: str) -> str:
    return f"{provider}-to-{protocol}"


def run(
    base_url: str, prompt: str, files: list[dict[str, str]], runs: list[dict[str, Any]]
) -> dict[str, Any]:
    """The report of ``runs`` (each: ``id``, ``provider``, ``model``, ...)
    against the gateway at ``base_url``, keyed by run id."""
    node = shutil.which("node")
    if node is None or not (MODULES / "node_modules" / "ai").exists():
        raise RuntimeError(f"node or {MODULES} is missing: `make test` installs it")
    spec = {
        "modules": str(MODULES),
        "base_url": base_url,
        "api_key": KEY,
        "prompt": prompt,
        "files": files,
        "runs": runs,
    }
    done = subprocess.run(
        [node, str(SCRIPT), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "NO_PROXY": "127.0.0.1"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return out
