"""Images through flatgate to a real vision-language model: vLLM (0.32, CPU)
serving the tiny random-weight LLaVA ``make_vision_model.py`` builds, behind
flatgate's ``openai`` backend (``vision_stack`` in ``conftest``).

That the image reached the model, and whole: vLLM counts each picture as
the patches its vision tower cuts it into (the model's config says how
many), so an image request's ``prompt_tokens`` is the same text's plus
exactly that; two pictures that differ only in colour get different greedy
answers; and what flatgate's adapter sent holds the very bytes the client
sent, as a data URL. A picture by URL is passed on as that URL, and vLLM
fetches it (from a loopback server the test runs); flatgate does not. A
picture sent to the Chat Completions edge, to the
Responses edge (``input_image``) and to the Messages edge (an ``image``
block with a base64 source) gets the answer vLLM gives the same picture and
text sent straight to it. A picture vLLM cannot decode is vLLM's 400 through
flatgate, never dropped; bytes that are no PNG at all are flatgate's own 400
and never reach vLLM.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.backends.vllm_fixtures import chat_view, messages_view
from tests.vllm.conftest import VISION_MODEL, VllmStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

QUESTION = "what color is this"
ANTHROPIC = {"anthropic-version": "2023-06-01", "x-api-key": "unused"}


def _png(color: tuple[int, int, int]) -> bytes:
    """A 96x48 PNG of one colour, with a square of another in it (not a
    square picture: the processor resizes and crops it to the tower's size)."""
    image = Image.new("RGB", (96, 48), color)
    image.paste((255 - color[0], 255 - color[1], 255 - color[2]), (10, 10, 30, 30))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


RED = _png((220, 20, 20))
BLUE = _png((20, 20, 220))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _data_url(data: bytes) -> str:
    return "data:image/png;base64," + _b64(data)


def _chat_content(png: bytes) -> list[dict[str, Any]]:
    return [
        {"type": "image_url", "image_url": {"url": _data_url(png)}},
        {"type": "text", "text": QUESTION},
    ]


@pytest.fixture(scope="module")
def image_tokens(vision_model: Path) -> int:
    """The tokens one picture stands for, by the model's config: the vision
    tower's patches; LLaVA's ``default`` selection leaves out CLIP's CLS."""
    config = json.loads((vision_model / "config.json").read_text())
    assert config["vision_feature_select_strategy"] == "default"
    vision = config["vision_config"]
    return int((vision["image_size"] // vision["patch_size"]) ** 2)


def _post(c: httpx.Client, url: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    with c.stream("POST", url, json=body, headers=headers) as r:
        return r.status_code, r.read()


def _chat(stack: VllmStack, base: str, body: dict[str, Any], stream: bool = False) -> Any:
    req: dict[str, Any] = {"model": VISION_MODEL, **body}
    if stream:
        req |= {"stream": True, "stream_options": {"include_usage": True}}
    with stack.client() as c:
        status, raw = _post(c, base + "/chat/completions", req)
    return chat_view(status, raw, stream)


def _only(view: Any) -> Any:
    assert view["status"] == 200, view
    return view["choices"][0]


def _sent_url(stack: VllmStack) -> str:
    """The one request flatgate's adapter sent vLLM: its one image part's URL."""
    seen = stack.recorder.take()
    assert len(seen) == 1, [s.path for s in seen]
    sent = json.loads(seen[0].request)
    parts = [p for m in sent["messages"] for p in m["content"] if isinstance(m["content"], list)]
    images = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert len(images) == 1, sent["messages"]
    return str(images[0])


def _sent_image(stack: VllmStack) -> bytes:
    """The one request flatgate's adapter sent vLLM: its one image part's bytes."""
    head, _, data = _sent_url(stack).partition(",")
    assert head == "data:image/png;base64", head
    return base64.b64decode(data)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_chat_image_reaches_the_model(
    vision_stack: VllmStack, image_tokens: int, stream: bool
) -> None:
    common = {"max_tokens": 8, "temperature": 0, "ignore_eos": True}
    text = _chat(
        vision_stack,
        vision_stack.vllm,
        {**common, "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}]},
    )
    answers = []
    for png in (RED, BLUE):
        body = {**common, "messages": [{"role": "user", "content": _chat_content(png)}]}
        direct = _chat(vision_stack, vision_stack.vllm, body, stream)
        vision_stack.recorder.take()
        through = _chat(vision_stack, vision_stack.gateway, body, stream)
        assert _sent_image(vision_stack) == png
        assert through == direct
        assert direct["usage"]["prompt_tokens"] == text["usage"]["prompt_tokens"] + image_tokens
        answers.append(_only(through)["text"])
    # The picture's pixels, not only its place in the prompt, reach the model.
    assert answers[0] != answers[1], answers
    assert _only(text)["text"] not in answers


class _Pictures:
    """A loopback HTTP server with one picture, counting its fetches."""

    def __init__(self, png: bytes) -> None:
        self.fetches = 0
        pictures = self

        class Serve(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                pictures.fetches += 1
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(png)))
                self.end_headers()
                self.wfile.write(png)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Serve)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/picture.png"


@pytest.fixture
def pictures() -> Iterator[_Pictures]:
    served = _Pictures(BLUE)
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.server.shutdown()
        served.server.server_close()


def test_chat_image_url_is_passed_on(vision_stack: VllmStack, pictures: _Pictures) -> None:
    common = {"max_tokens": 8, "temperature": 0, "ignore_eos": True}
    by_value = _chat(
        vision_stack,
        vision_stack.vllm,
        {**common, "messages": [{"role": "user", "content": _chat_content(BLUE)}]},
    )
    content = [
        {"type": "image_url", "image_url": {"url": pictures.url}},
        {"type": "text", "text": QUESTION},
    ]
    body = {**common, "messages": [{"role": "user", "content": content}]}
    direct = _chat(vision_stack, vision_stack.vllm, body)
    assert pictures.fetches == 1
    vision_stack.recorder.take()
    through = _chat(vision_stack, vision_stack.gateway, body)
    assert _sent_url(vision_stack) == pictures.url
    # vLLM fetched it once more; flatgate did not fetch it at all.
    assert pictures.fetches == 2
    assert through == direct == by_value
    assert _only(through)["text"]


def test_responses_input_image(vision_stack: VllmStack) -> None:
    want = _chat(
        vision_stack,
        vision_stack.vllm,
        {
            "max_tokens": 8,
            "temperature": 0,
            "messages": [{"role": "user", "content": _chat_content(BLUE)}],
        },
    )
    body = {
        "model": VISION_MODEL,
        "max_output_tokens": 8,
        "temperature": 0,
        "store": False,
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": _data_url(BLUE)},
                    {"type": "input_text", "text": QUESTION},
                ],
            }
        ],
    }
    vision_stack.recorder.take()
    with vision_stack.client() as c:
        r = c.post(vision_stack.gateway + "/responses", json=body)
    assert r.status_code == 200, r.text
    assert _sent_image(vision_stack) == BLUE
    answer = r.json()
    text = "".join(
        part["text"]
        for item in answer["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )
    assert text == _only(want)["text"]
    assert answer["usage"]["input_tokens"] == want["usage"]["prompt_tokens"]


def test_messages_image_block(vision_stack: VllmStack) -> None:
    want = _chat(
        vision_stack,
        vision_stack.vllm,
        {
            "max_tokens": 8,
            "temperature": 0,
            "messages": [{"role": "user", "content": _chat_content(RED)}],
        },
    )
    source = {"type": "base64", "media_type": "image/png", "data": _b64(RED)}
    body = {
        "model": VISION_MODEL,
        "max_tokens": 8,
        "temperature": 0,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": source},
                    {"type": "text", "text": QUESTION},
                ],
            }
        ],
    }
    vision_stack.recorder.take()
    with vision_stack.client() as c:
        status, raw = _post(c, vision_stack.gateway + "/messages", body, ANTHROPIC)
    got = messages_view(status, raw, False)
    assert status == 200, got
    assert _sent_image(vision_stack) == RED
    assert got["text"] == _only(want)["text"]
    assert got["usage"]["input_tokens"] == want["usage"]["prompt_tokens"]


def test_undecodable_image_is_vllms_400(vision_stack: VllmStack) -> None:
    """A PNG cut after its header: flatgate's check reads its signature and
    size and passes it on; vLLM cannot decode it and refuses it."""
    broken = RED[:64]
    body = {
        "max_tokens": 8,
        "temperature": 0,
        "messages": [{"role": "user", "content": _chat_content(broken)}],
    }
    direct = _chat(vision_stack, vision_stack.vllm, body)
    assert direct["status"] == 400, direct
    reason = direct["error"]["message"]
    assert "image" in reason.lower(), reason
    vision_stack.recorder.take()
    through = _chat(vision_stack, vision_stack.gateway, body)
    assert _sent_image(vision_stack) == broken
    assert through["status"] == 400, through
    assert reason in through["error"]["message"], through


def test_bytes_that_are_no_png_are_flatgates_400(vision_stack: VllmStack) -> None:
    body = {
        "max_tokens": 8,
        "temperature": 0,
        "messages": [{"role": "user", "content": _chat_content(b"GIF89a" + bytes(64))}],
    }
    vision_stack.recorder.take()
    through = _chat(vision_stack, vision_stack.gateway, body)
    assert through["status"] == 400, through
    assert through["error"]["code"] == "invalid_media", through
    assert "messages.[0].content.[0]" in through["error"]["message"], through
    assert vision_stack.recorder.take() == []
