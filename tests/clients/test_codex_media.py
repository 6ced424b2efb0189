"""Codex CLI with an image, end to end: ``codex exec --image shot.png
PROMPT`` through the gateway's Responses edge to the stub behind an
``openai-responses`` backend (one run: the Responses edge's ``input_image``
to each backend protocol is the SDK matrix's, ``test_media_matrix``).

Codex (0.171.0) sends the image in the user turn as an ``input_image`` whose
``image_url`` is a ``data:`` URL of the file's bytes (a small PNG is not
re-encoded), between ``<image name=[Image #1] path="...">`` and ``</image>``
text parts, with ``detail: "original"`` for a model it knows takes images
(``gpt-5.5``; ``"high"`` for a name it has no metadata for, whose fallback
metadata still lets it send images). The stub echoes the last user message with
the image described (its digest and size), and a tap (``tests.clients.tap``)
in front of it records what the backend was sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.media import image_echo, png
from tests.clients.tap import TappedGateway, media_in, tapped_gateway
from tests.clients.test_codex import CODEX, messages, run_codex

pytestmark = pytest.mark.integration

PROTOCOL = "openai-responses"
PNG = png()
PROMPT = "what color is this image"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TappedGateway]:
    with tapped_gateway(tmp_path_factory.mktemp("codex-media"), (PROTOCOL,)) as running:
        yield running


def test_codex_sends_an_image_that_reaches_the_backend_intact(
    gateway: TappedGateway, tmp_path: Path
) -> None:
    if not CODEX.exists():
        raise RuntimeError(f"{CODEX} is missing: `make test` installs it")
    shot = tmp_path / "shot.png"
    shot.write_bytes(PNG)
    name = f"gpt-5.5-echo-{PROTOCOL}"
    url = f"{gateway.url}/v1"
    status, events, stderr = run_codex(CODEX, tmp_path, url, name, PROMPT, "--image", str(shot))
    assert status == 0, f"codex exited {status}:\n{stderr[-3000:]}\n{events}"
    assert not [e for e in events if e["type"] in ("turn.failed", "error")]
    [answer] = messages(events)
    # The stub saw the file's bytes (its digest and size), beside the prompt.
    assert image_echo(PNG) in answer, answer
    assert PROMPT in answer, answer
    [sent] = gateway.taps[PROTOCOL].bodies("/responses")
    assert media_in(sent) == [("image/png", PNG)]
