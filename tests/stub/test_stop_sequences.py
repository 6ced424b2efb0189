"""The stub honours stop sequences in every protocol: the echo ends before the
first one the text contains, and each wire names the one that matched the way
its API does (the fbs final chunk's ``stop_sequence``, vLLM's ``stop_reason``,
Anthropic's ``stop_reason: stop_sequence`` and ``stop_sequence``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.proxy.apis.anthropic_messages.request import decode_messages
from flatgate.proxy.backends.anthropic.stub import AnthropicWire
from flatgate.proxy.backends.dialect import StubRequest, answer
from flatgate.proxy.backends.fbs.stub import FbsWire, parse_request
from flatgate.proxy.backends.openai.stub import OpenAIWire
from flatgate.proxy.wire.chunk.frames import FrameSplitter, unprefix
from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.schema import FRAMES, FinishReason, Role
from tests.edge.helpers import decode_request_fb
from tests.stub.helpers import sse_events
from tests.stub.test_wires import rendered

TEXT = "alpha beta END gamma ## delta"
USER = {"role": "user", "content": "x"}


def _no_header(name: str) -> str | None:
    return None


def request(text: str = TEXT, stop: tuple[str, ...] = ("##", "END"), **kw: Any) -> StubRequest:
    fields: dict[str, Any] = {
        "request_id": "r1",
        "model": "m",
        "messages": ((Role.User, text),),
        "max_tokens": 0,
        "forced_tool": "",
        "stream": True,
        "stop": stop,
    }
    fields.update(kw)
    return StubRequest(**fields)


@pytest.mark.parametrize(
    ("stop", "text", "matched"),
    [
        (("##", "END"), "alpha beta ", "END"),  # the earliest in the text, not in the list
        (("gamma",), "alpha beta END ", "gamma"),
        (("E", "END"), "alpha beta ", "END"),  # at one place, the longest
        (("absent", ""), TEXT, ""),
        ((), TEXT, ""),
    ],
)
def test_the_echo_ends_before_the_first_stop_sequence(
    stop: tuple[str, ...], text: str, matched: str
) -> None:
    ans = answer(request(stop=stop))
    assert (ans.text, ans.stop_sequence, ans.finish) == (text, matched, FinishReason.STOP)


def test_max_tokens_before_the_stop_sequence_is_length() -> None:
    ans = answer(request(max_tokens=1))
    assert (ans.text, ans.stop_sequence, ans.finish) == ("alpha ", "", FinishReason.LENGTH)


def test_fbs_final_chunk_names_the_stop_sequence() -> None:
    frames = FrameSplitter().feed(rendered(FbsWire(), request(), {"accept": FRAMES}))
    chunks = [decode_chunk(unprefix(f)) for f in frames]
    assert "".join(c.content for c in chunks) == "alpha beta "
    assert chunks[-1].stop_sequence == "END"
    assert chunks[-1].finish_reason is FinishReason.STOP


def test_fbs_reads_stop_from_the_request() -> None:
    body = json.dumps(
        {"model": "m", "max_tokens": 5, "stop_sequences": ["##"], "messages": [USER]}
    ).encode()
    buf = write_messages(decode_messages(body), provider=2, model_name="m")
    assert decode_request_fb(buf)["stop"] == [b"##"]
    assert parse_request(buf).stop == ("##",)


def test_openai_finish_carries_vllm_stop_reason() -> None:
    events = [d for _, d in sse_events(rendered(OpenAIWire(), request()).decode())[:-1]]
    last = events[-1]["choices"][0]
    assert (last["finish_reason"], last["stop_reason"]) == ("stop", "END")
    assert all("stop_reason" not in e["choices"][0] for e in events[:-1])
    whole = OpenAIWire().complete(request(), answer(request()), _no_header)
    choice = json.loads(whole.body)["choices"][0]
    assert (choice["message"]["content"], choice["stop_reason"]) == ("alpha beta ", "END")


def test_anthropic_message_delta_names_the_stop_sequence() -> None:
    events = sse_events(rendered(AnthropicWire(), request()).decode())
    [delta] = [d for name, d in events if name == "message_delta"]
    assert delta["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    whole = json.loads(AnthropicWire().complete(request(), answer(request()), _no_header).body)
    assert (whole["stop_reason"], whole["stop_sequence"]) == ("stop_sequence", "END")
    plain = json.loads(
        AnthropicWire().complete(request(stop=()), answer(request(stop=())), _no_header).body
    )
    assert (plain["stop_reason"], plain["stop_sequence"]) == ("end_turn", None)
