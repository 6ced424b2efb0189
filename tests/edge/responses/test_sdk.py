"""The openai SDK's own Responses client against what flatgate renders:
``create``, ``stream``, ``retrieve``, ``input_items.list``, ``delete`` and a
tool round trip by ``previous_response_id``, through an ``httpx2``
``MockTransport`` that runs ``ResponsesApi``'s steps (decode, prepare,
write, render or fold, finish, the stored responses' answers) over a memory
store, with a scripted model in place of the proxy: the bytes the SDK reads
are the ones the edge would send."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx2
import openai
import pytest
from openai.types.responses import ResponseFailedEvent

from flatgate.edge_translator.responses.endpoint import (
    ResponsesApi,
    delete_answer,
    input_items_answer,
    retrieve_answer,
)
from flatgate.edge_translator.responses.store import StoredResponses
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.apis.errors import openai_body
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.limits import MemoryStore, StateSection
from flatgate.proxy.wire.chunk.frames import Chunk, ChunkError, ToolCallDelta, Usage
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.schema import FinishReason
from tests.edge.responses.common import Budget

SERVED = ModelConfig(name="served", provider="OpenAI")
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def model(req: Request) -> list[Chunk]:
    """A scripted model: calls the first tool when it has one and no result
    yet, else answers the last message; "fail" fails mid-stream."""
    last = req.messages[-1]
    if last.role == "tool":
        return [Chunk(content="It is "), Chunk(content=last.content or ""), _end(FinishReason.STOP)]
    if req.tools:
        call = ToolCallDelta(0, "call_7", req.tools[0].function.name, '{"city":')
        return [
            Chunk(tool_calls=(call,)),
            Chunk(tool_calls=(ToolCallDelta(0, arguments='"Paris"}'),)),
            _end(FinishReason.TOOL_CALLS),
        ]
    if last.content == "fail":
        return [
            Chunk(content="Par"),
            Chunk(error=ChunkError("backend_stream_error", "the backend broke")),
        ]
    return [
        Chunk(model=req.model_name, content="You said: "),
        Chunk(content=last.content or ""),
        _end(FinishReason.STOP),
    ]


def _end(reason: FinishReason) -> Chunk:
    return Chunk(finish_reason=reason, usage=Usage(11, 7, cached_tokens=3, reasoning_tokens=2))


class Edge:
    """``POST /v1/responses`` and the stored responses' paths, for one tenant."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.api = ResponsesApi(StoredResponses(self.store, StateSection()))
        self.wires: list[Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        return asyncio.run(self._answer(request))

    async def _answer(self, request: httpx2.Request) -> httpx2.Response:
        stored = self.api.store
        assert stored is not None
        path = request.url.path
        if request.method == "POST":
            try:
                return await self._create(request.content)
            except FlatgateError as err:
                return httpx2.Response(err.status, content=openai_body(err))
        rid = path.removeprefix("/v1/responses/").removesuffix("/input_items")
        if path.endswith("/input_items"):
            status, body = input_items_answer(
                await stored.input_items("t", rid), rid, request.url.query.decode()
            )
        elif request.method == "DELETE":
            status, body = delete_answer(await stored.delete("t", rid), rid)
        else:
            status, body = retrieve_answer(await stored.response("t", rid), rid)
        return httpx2.Response(status, content=body, headers={"content-type": "application/json"})

    async def _create(self, body: bytes) -> httpx2.Response:
        api = self.api
        req = api.decode(body)
        rid = api.new_id()
        req = await api.prepare(req, tenant="t", response_id=rid, budget=Budget())
        wire = read_request(api.write(req, SERVED, tenant="t", request_id=rid))
        self.wires.append(wire)
        asked = api.asked(req, rid, rid, "served")
        await api.admitted(asked, tenant="t")
        if not asked.stream:
            folding = api.aggregator(asked, 1700000000)
            for chunk in model(wire):
                folding.feed(chunk)
            await api.finish(asked, folding, tenant="t")
            return httpx2.Response(
                200, content=folding.body(), headers={"content-type": "application/json"}
            )
        rendering = api.renderer(asked, 1700000000)
        events = []
        try:
            for chunk in model(wire):
                events.append(rendering.feed(chunk))
        except FlatgateError as err:
            events.append(api.error_event(err))
        await api.finish(asked, rendering, tenant="t")
        return httpx2.Response(
            200, content=b"".join(events), headers={"content-type": "text/event-stream"}
        )


@pytest.fixture
def edge() -> Iterator[Edge]:
    made = Edge()
    yield made
    asyncio.run(made.store.aclose())


@pytest.fixture
def client(edge: Edge) -> Iterator[openai.OpenAI]:
    http = httpx2.Client(transport=httpx2.MockTransport(edge))
    yield openai.OpenAI(
        base_url="http://edge.test/v1", api_key="k", max_retries=0, http_client=http
    )
    http.close()


def test_create(client: openai.OpenAI) -> None:
    resp = client.responses.create(model="m", input="hello", instructions="Be brief.")
    assert resp.output_text == "You said: hello"
    assert resp.status == "completed" and resp.id.startswith("resp_")
    assert resp.instructions == "Be brief."
    assert resp.usage is not None
    assert (resp.usage.input_tokens, resp.usage.output_tokens, resp.usage.total_tokens) == (
        11,
        7,
        18,
    )
    assert resp.usage.input_tokens_details.cached_tokens == 3
    assert resp.usage.output_tokens_details.reasoning_tokens == 2


def test_stream(client: openai.OpenAI) -> None:
    with client.responses.stream(model="m", input="there") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds.count("response.output_text.delta") == 2
    assert kinds[-1] == "response.completed"
    assert final.output_text == "You said: there"


def test_create_stream_true_yields_typed_events(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="m", input="x", stream=True))
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(set(numbers)) and numbers[0] == 0
    done = [e for e in events if e.type == "response.output_text.done"]
    assert done[0].model_dump()["text"] == "You said: x"


def test_a_tool_round_trip(client: openai.OpenAI, edge: Edge) -> None:
    first = client.responses.create(model="m", input="Weather in Paris?", tools=TOOLS)  # type: ignore[arg-type]
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert (call.name, call.call_id, json.loads(call.arguments)) == (
        "get_weather",
        "call_7",
        {"city": "Paris"},
    )
    second = client.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    )
    assert second.output_text == "It is sunny"
    assert [m.role for m in edge.wires[-1].messages] == ["user", "assistant", "tool"]


def test_a_streamed_tool_call(client: openai.OpenAI) -> None:
    with client.responses.stream(model="m", input="Weather?", tools=TOOLS) as stream:  # type: ignore[arg-type]
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds
    (call,) = final.output
    assert call.type == "function_call" and call.arguments == '{"city":"Paris"}'


def test_retrieve_input_items_and_delete(client: openai.OpenAI) -> None:
    made = client.responses.create(model="m", input=[{"role": "user", "content": "keep me"}])
    got = client.responses.retrieve(made.id)
    assert (got.id, got.output_text) == (made.id, "You said: keep me")
    items = client.responses.input_items.list(made.id)
    assert [i.model_dump()["content"][0]["text"] for i in items.data] == ["keep me"]
    client.responses.delete(made.id)  # the SDK reads no body from a delete
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)


def test_an_unknown_previous_response(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="m", input="x", previous_response_id="resp_gone")
    assert caught.value.code == "previous_response_not_found"
    assert caught.value.param == "previous_response_id"


def test_a_refused_field_is_a_bad_request_naming_it(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input="x", background=True)
    assert caught.value.param == "background"


def test_a_failure_mid_stream_is_response_failed(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="m", input="fail", stream=True))
    assert events[-1].type == "response.failed"
    assert isinstance(events[-1], ResponseFailedEvent)
    failed = events[-1].response
    assert failed.status == "failed" and failed.error is not None
    assert "the backend broke" in failed.error.message
    assert failed.output_text == "Par"
