"""Claude Code with an image, end to end: ``claude -p "what color is this
image? @shot.png"`` through the gateway to the stub, then a second turn
(``--continue``) whose history carries the image, in the ``anthropic``
backend protocol and in ``openai`` (Messages to Chat Completions).

Claude Code reads an ``@`` image with its Read tool and sends it in the user
turn as an ``image`` block with a ``base64`` source, as the file's bytes
(a small PNG is not resized or re-encoded: the digest the stub echoes is the
file's), and sends that block again with every later turn of the session.
Before flatgate carried images, the first turn was a 400 and so was every
later one.

The stub echoes the last user message, so the first turn's answer holds the
image's description (its digest and size); a second turn's echo is only its
own prompt, so each backend sits behind a tap (``tests.clients.tap``) that
records what it was sent: the second turn's request holds the image, the
same bytes, in the backend's own shape (an ``image`` block, or an
``image_url`` data URL).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients.media import image_echo, png
from tests.clients.tap import TappedGateway, media_in, tapped_gateway
from tests.clients.test_claude_code import CLAUDE, KEY, claude_env, result_of

pytestmark = pytest.mark.integration

PROTOCOLS = ("anthropic", "openai")
PNG = png()
FIRST = "what color is this image? @shot.png"
SECOND = "and what did I show you before?"
# Where each protocol's backend is sent a turn.
_PATHS = {"anthropic": "/messages", "openai": "/chat/completions"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TappedGateway]:
    with tapped_gateway(tmp_path_factory.mktemp("claude-media"), PROTOCOLS) as running:
        yield running


def run(root: Path, url: str, name: str, *args: str) -> tuple[int, dict[str, Any], str]:
    """``claude -p ... --model name`` in ``root/project``: status, result event, stderr."""
    if not CLAUDE.exists():
        raise RuntimeError(f"{CLAUDE} is missing: `make test` installs it")
    done = subprocess.run(
        [str(CLAUDE), "-p", *args, "--model", name, "--output-format", "stream-json", "--verbose"],
        cwd=root / "project",
        env=claude_env(root, url, KEY),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    result = result_of(events) if any(e["type"] == "result" for e in events) else {}
    return done.returncode, result, done.stderr


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_claude_code_sends_an_image_and_keeps_it_in_its_history(
    gateway: TappedGateway, tmp_path: Path, protocol: str
) -> None:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "shot.png").write_bytes(PNG)
    tap = gateway.taps[protocol]
    name = f"echo-{protocol}"
    before = len(tap.bodies(_PATHS[protocol]))

    status, result, stderr = run(tmp_path, gateway.url, name, FIRST)
    assert status == 0, f"claude exited {status}: {result.get('result')}\n{stderr[-3000:]}"
    assert (result["subtype"], result["is_error"]) == ("success", False)
    # The stub saw the file's bytes: its digest and size are in the echo,
    # after the image and before the prompt's text.
    text = result["result"]
    assert image_echo(PNG) in text, text
    assert text.index(image_echo(PNG)) < text.index(FIRST), text
    first = tap.bodies(_PATHS[protocol])[before:]
    assert [media_in(body) for body in first] == [[("image/png", PNG)]]

    status, result, stderr = run(tmp_path, gateway.url, name, SECOND, "--continue")
    assert status == 0, f"claude exited {status}: {result.get('result')}\n{stderr[-3000:]}"
    assert (result["subtype"], result["is_error"]) == ("success", False)
    assert result["result"].endswith(SECOND), result["result"]
    # The second turn's request carried the first turn's image again.
    [second] = tap.bodies(_PATHS[protocol])[before + 1 :]
    assert media_in(second) == [("image/png", PNG)]
    roles = [m["role"] for m in second["messages"]]
    assert "assistant" in roles, roles
