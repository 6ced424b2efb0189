"""Claude Code with an image, end to end: ``claude -p "what color is this
image? @shot.png"`` through the gateway to the stub, then a second turn
(``--continue``) whose history carries the image, in the ``anthropic``
backend protocol and in ``openai`` (Messages to Chat Completions).

Claude Code reads an ``@`` image with its Read tool and sends it in the user
turn as an ``image`` block with a ``base64`` source, and sends that block
again with every later turn of the session. A small PNG goes as the file's
bytes (the digest the stub echoes is the file's); one wider than 2000 px is
resized and re-encoded first (2.1.332 sends a 2400x1600 PNG as a 2000x1333
PNG), so for that one the test checks that what reached the backend is a
smaller PNG of the same proportions, and that the echo describes it.
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

import io
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.clients.media import image_echo, png
from tests.clients.tap import TappedGateway, media_in, tapped_gateway
from tests.clients.test_claude_code import CLAUDE, KEY, claude_env, result_of

pytestmark = pytest.mark.integration

PROTOCOLS = ("anthropic", "openai")
PNG = png()
# Past Claude Code's 2000 px: it sends the image resized (a PNG of its own).
BIG = png(size=(2400, 1600))
FIRST = "what color are these images? @shot.png @big.png"
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
    (tmp_path / "project" / "big.png").write_bytes(BIG)
    tap = gateway.taps[protocol]
    name = f"echo-{protocol}"
    before = len(tap.bodies(_PATHS[protocol]))

    status, result, stderr = run(tmp_path, gateway.url, name, FIRST)
    assert status == 0, f"claude exited {status}: {result.get('result')}\n{stderr[-3000:]}"
    assert (result["subtype"], result["is_error"]) == ("success", False)
    # The stub saw the small file's bytes: their digest and size are in the
    # echo, before the prompt's text; the large one as Claude Code resized
    # it, a smaller PNG of the same proportions, described as it arrived.
    text = result["result"]
    [first] = tap.bodies(_PATHS[protocol])[before:]
    [(_, small), (kind, resized)] = media_in(first)
    assert small == PNG
    with Image.open(io.BytesIO(resized)) as image:
        assert (kind, image.format) == ("image/png", "PNG")
        width, height = image.size
    assert width < 2400 and abs(width / height - 1.5) < 0.01, (width, height)
    for sent in (image_echo(PNG), image_echo(resized)):
        assert sent in text, text
        assert text.index(sent) < text.index(FIRST), text

    status, result, stderr = run(tmp_path, gateway.url, name, SECOND, "--continue")
    assert status == 0, f"claude exited {status}: {result.get('result')}\n{stderr[-3000:]}"
    assert (result["subtype"], result["is_error"]) == ("success", False)
    assert result["result"].endswith(SECOND), result["result"]
    # The second turn's request carried the first turn's images again.
    [second] = tap.bodies(_PATHS[protocol])[before + 1 :]
    assert media_in(second) == [("image/png", PNG), ("image/png", resized)]
    roles = [m["role"] for m in second["messages"]]
    assert "assistant" in roles, roles
