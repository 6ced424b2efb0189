"""``backends.gemini.stub_wire``: the stub's Gemini side. Requests are what
``encode_gemini`` writes (so the stub reads what the backend sends); answers
are read by google-genai's own response type and by our translators
(``GeminiStream``, ``GeminiWhole``), so the stub speaks what the backend
reads."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import types as genai_types

from flatgate.proxy.backends.dialect import Rejected, StubRequest, answer
from flatgate.proxy.backends.gemini.encode import encode_gemini
from flatgate.proxy.backends.gemini.stream import GeminiStream
from flatgate.proxy.backends.gemini.stub_wire import (
    GeminiRendering,
    error_reply,
    parse_gemini,
    render_stream,
    render_whole,
    signature,
)
from flatgate.proxy.backends.gemini.whole import GeminiWhole
from flatgate.proxy.wire.chunk.frames import Chunk
from flatgate.proxy.wire.request.decode import FunctionCall, Message, Request, ToolCall
from flatgate.proxy.wire.schema import FinishReason, Role
from tests.backends.gemini.helpers import sdk_response
from tests.backends.helpers import calls, content, error_of, final, reasoning, request, run

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000")


def parse(body: dict[str, Any] | bytes, model: str = "gemini-2.5-flash", **kw: Any) -> StubRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_gemini(raw, model=model, request_id="rq", **kw)


def rejected(body: dict[str, Any], model: str = "gemini-2.5-flash") -> dict[str, Any]:
    with pytest.raises(Rejected) as exc:
        parse(body, model)
    reply = exc.value.reply
    assert reply.status == 400
    doc: dict[str, Any] = json.loads(reply.body)
    assert doc["error"]["status"] == "INVALID_ARGUMENT"
    assert doc["error"]["code"] == 400
    return doc


def events(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(e[6:]) for e in data.split(b"\r\n\r\n") if e.startswith(b"data: ")]


def streamed(req: StubRequest) -> tuple[bytes, list[Chunk]]:
    ans = answer(req)
    body = b"".join(render_stream(req, ans))
    for doc in events(body):
        sdk_response(doc)
    return body, run(GeminiStream("rq", req.model), [body])


def text(s: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": s}]}


# -- reading requests --------------------------------------------------------------


def test_the_stub_reads_what_the_encoder_writes() -> None:
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    req = request(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is "},
                        {"type": "image_url", "image_url": {"url": url}},
                    ],
                },
            ],
            "max_tokens": 9,
            "stop": ["zz"],
            "tools": [
                {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
            ],
        }
    )
    stub = parse(encode_gemini(req, [], False))
    assert stub.messages[0] == (Role.System, "Be brief.")
    role, said = stub.messages[1]
    assert role == Role.User
    assert said.startswith("What is  [image image/png 29 bytes sha256:")  # described() spaces parts
    assert (stub.max_tokens, stub.stop) == (9, ("zz",))
    assert [t.name for t in stub.offered] == ["f"]
    assert json.loads(stub.offered[0].parameters) == {"type": "object"}


def test_a_forced_function_and_none() -> None:
    decls = [{"functionDeclarations": [{"name": "a"}, {"name": "b"}]}]
    forced = {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["b"]}}
    stub = parse({"contents": [text("hi")], "tools": decls, "toolConfig": forced})
    assert stub.forced_tool == "b"
    none = {"functionCallingConfig": {"mode": "NONE"}}
    assert parse({"contents": [text("hi")], "tools": decls, "toolConfig": none}).offered == ()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"contents": []}, "contents is not specified"),
        ({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]}, "valid role"),
        ({"contents": [{"role": "user", "parts": []}]}, "must not be empty"),
        (
            {"contents": [{"role": "user", "parts": [{"functionCall": {"name": "f"}}]}]},
            "only from the model",
        ),
        ({"contents": [{"role": "user", "parts": [{}]}]}, "exactly one data member"),
        ({"contents": [text("x")], "generationConfig": {"temperature": 3}}, "0 to 2"),
        ({"contents": [text("x")], "generationConfig": {"maxOutputTokens": 0}}, "at least 1"),
        ({"contents": "no"}, "Invalid JSON payload"),
    ],
)
def test_what_google_refuses(body: dict[str, Any], says: str) -> None:
    assert says in rejected(body)["error"]["message"]


# -- answers -------------------------------------------------------------------


def test_a_whole_answer_is_googles_shape_and_our_translators_read_it() -> None:
    stub = parse({"contents": [text("hello there world")]})
    body = render_whole(stub, answer(stub))
    sdk = sdk_response(body)
    assert sdk.text == "hello there world"
    assert sdk.candidates is not None
    assert sdk.candidates[0].finish_reason == "STOP"
    chunks = run(GeminiWhole("rq", stub.model), [body])
    assert content(chunks) == "hello there world"
    assert final(chunks).finish_reason == FinishReason.STOP
    assert final(chunks).usage is not None


def test_a_stream_ends_with_the_signed_empty_part() -> None:
    stub = parse(
        {"contents": [text("one two three")], "generationConfig": {"maxOutputTokens": 2}},
        stream=True,
    )
    body, chunks = streamed(stub)
    last = events(body)[-1]
    assert last["candidates"][0]["content"]["parts"] == [
        {"text": "", "thoughtSignature": signature("one two ")}
    ]
    assert last["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert content(chunks) == "one two "
    assert final(chunks).finish_reason == FinishReason.LENGTH


def test_thoughts_when_asked_for() -> None:
    stub = parse(
        {
            "contents": [text("a b")],
            "generationConfig": {"thinkingConfig": {"includeThoughts": True}},
        },
        stream=True,
    )
    _, chunks = streamed(stub)
    assert reasoning(chunks) == "The user wrote 2 words; I repeat them back."
    usage = final(chunks).usage
    assert usage is not None
    assert usage.reasoning_tokens == 9
    doc = json.loads(render_whole(stub, answer(stub)))
    sdk_response(doc)
    assert doc["candidates"][0]["content"]["parts"][0]["thought"] is True


def test_a_mid_stream_error_is_googles_error_event() -> None:
    stub = parse({"contents": [text("a b")]}, stream=True)
    r = GeminiRendering(stub, answer(stub))
    chunks = run(GeminiStream("rq", "m"), [r.opening(), next(iter(r.steps())), r.error()])
    assert content(chunks) == "a "
    assert error_of(chunks).message.startswith("INTERNAL: ")


def test_error_reply_is_googles_error_body() -> None:
    reply = error_reply(429, "RESOURCE_EXHAUSTED", "Quota exceeded.")
    assert reply.status == 429
    assert json.loads(reply.body) == {
        "error": {"code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED"}
    }


# -- the thought signature round trip (Gemini 3's rule) ------------------------------------


def test_a_signed_call_goes_round_and_comes_back_signed() -> None:
    tools = [{"functionDeclarations": [{"name": "lookup"}]}]
    forced = {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["lookup"]}}
    first = {"contents": [text("find cats")], "tools": tools, "toolConfig": forced}
    stub = parse(first, model="gemini-3-pro-preview", stream=True)
    _, chunks = streamed(stub)
    [call] = calls(chunks).values()
    [part] = [c.reasoning_part for c in chunks if c.reasoning_part is not None]
    (call_id,) = call["ids"]
    # The client sends the conversation back, with the reasoning part it was
    # given (a Responses client), or with the call's id alone (any other).
    for reasoning_back in ([part], None):
        call_ = ToolCall(call_id, FunctionCall("lookup", call["arguments"]))
        req = Request(
            model_name="gemini-3-pro-preview",
            messages=[
                Message("user", "find cats"),
                Message("assistant", "", tool_calls=[call_], reasoning=reasoning_back),
                Message("tool", "3 cats", tool_call_id=call_id),
            ],
        )
        back = encode_gemini(req, [], False)
        stub = parse(back, model="gemini-3-pro-preview")
        assert stub.messages[-1] == (Role.Tool, '{"output":"3 cats"}')
    # Without the signature, Gemini 3 refuses the conversation; with another, too.
    doc = json.loads(back)
    doc["tools"] = tools
    del doc["contents"][1]["parts"][0]["thoughtSignature"]
    said = rejected(doc, "gemini-3-pro-preview")["error"]["message"]
    assert (
        said == "Function call `lookup` in the `2.` content block is missing a `thought_signature`."
    )
    doc["contents"][1]["parts"][0]["thoughtSignature"] = base64.b64encode(b"other").decode()
    assert (
        rejected(doc, "gemini-3-pro-preview")["error"]["message"] == "Corrupted thought signature."
    )
    # The stub's own signature in the URL-safe alphabet, unpadded (what
    # google-genai sends back): the same bytes, accepted.
    mine = base64.b64decode(signature("lookup"))
    doc["contents"][1]["parts"][0]["thoughtSignature"] = (
        base64.urlsafe_b64encode(mine).decode().rstrip("=")
    )
    assert parse(doc, "gemini-3-pro-preview").messages[-1][0] == Role.Tool
    # Gemini 2.5 does not insist.
    del doc["contents"][1]["parts"][0]["thoughtSignature"]
    assert parse(doc, "gemini-2.5-flash").messages[-1][0] == Role.Tool


def test_the_fault_suffix_is_read_from_the_model() -> None:
    stub = parse({"contents": [text("x")]}, model="gemini-2.5-flash@die:2")
    assert (stub.model, stub.fault, stub.fault_after) == ("gemini-2.5-flash", "die", 2)


def test_the_stub_reads_what_google_genai_writes() -> None:
    """google-genai writes some members in proto's snake_case spelling
    (``mime_type``, ``file_uri``, ``include_thoughts``,
    ``parameters_json_schema``): the model reads both."""
    sent: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(
            200, content=render_whole(parse(request.content), answer(parse(request.content)))
        )

    client = genai.Client(
        api_key="k",
        http_options=genai_types.HttpOptions(
            base_url="http://127.0.0.1:9", client_args={"transport": httpx.MockTransport(handler)}
        ),
    )
    config = genai_types.GenerateContentConfig(
        system_instruction="Be brief.",
        thinking_config=genai_types.ThinkingConfig(include_thoughts=True, thinking_budget=64),
        tools=[
            genai_types.Tool(
                function_declarations=[
                    genai_types.FunctionDeclaration(
                        name="f", parameters_json_schema={"type": "object"}
                    )
                ]
            )
        ],
    )
    contents: list[Any] = [
        genai_types.Part.from_bytes(data=PNG, mime_type="image/png"),
        genai_types.Part.from_uri(file_uri="gs://bucket/cat.png", mime_type="image/png"),
        "what are these?",
    ]
    got = client.models.generate_content(model="gemini-2.5-flash", contents=contents, config=config)
    assert b'"mime_type"' in sent[0] and b'"include_thoughts"' in sent[0]
    stub = parse(sent[0])
    said = stub.messages[-1][1]
    assert "[image image/png 29 bytes sha256:" in said
    assert "[image url gs://bucket/cat.png]" in said
    assert said.endswith("what are these?")
    assert stub.params == {"thoughts": True}
    assert json.loads(stub.offered[0].parameters) == {"type": "object"}
    assert got.text is not None and got.text.endswith("what are these?")


def test_an_image_in_google_genais_url_safe_base64_arrives_intact() -> None:
    """google-genai (pydantic) writes bytes in the URL-safe alphabet; Google
    reads both, and so does the model (``blob_bytes``)."""
    data = b"\xfb\xef\xff" * 20  # "+/" in the standard alphabet, "-_" in the URL-safe one
    body = genai_types.Part.from_bytes(data=data, mime_type="image/png").model_dump_json(
        by_alias=True, exclude_none=True
    )
    wire = json.loads(body)["inlineData"]["data"]
    assert "-" in wire or "_" in wire
    stub = parse({"contents": [{"role": "user", "parts": [json.loads(body), {"text": "x"}]}]})
    digest = hashlib.sha256(data).hexdigest()[:12]
    assert f"[image image/png {len(data)} bytes sha256:{digest}" in stub.messages[-1][1]
