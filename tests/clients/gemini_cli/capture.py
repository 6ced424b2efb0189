"""Capture Gemini CLI's first request into ``fixtures/gemini_cli_request.json``.

Run from the repository, once ``make clients`` has installed the pinned CLI:

    .venv/bin/python tests/clients/gemini_cli/capture.py

It runs ``gemini -p PROMPT -m house-model`` (``test_gemini_cli.capture``:
a fresh home holding ``SETTINGS``, the API a loopback recorder) and writes
the one request it sends, scrubbed (``test_gemini_cli.scrub``: the home and
project paths, the host, length and key headers), as the fixture:
``{"method", "path", "headers", "body"}``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from tests.clients.test_gemini_cli import FIXTURE, capture, scrub  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as home:
        root = Path(home)
        [request] = [scrub(r, root) for r in capture(root)]
    FIXTURE.write_text(json.dumps(request, indent=2, ensure_ascii=False) + "\n")
    print(f"{FIXTURE.relative_to(ROOT)}: {len(json.dumps(request['body']))} bytes of body")


if __name__ == "__main__":
    main()
