"""``ResponsesApi``'s own parts (``responses.endpoint``) over a real
``StoredResponses`` (a memory store): ``previous_response_id`` chains, what
``store`` saves and when, a tenant's responses being its own, and the
answers of ``GET`` / ``DELETE /v1/responses/{id}`` and its ``input_items``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai.types.responses as sdk
import pytest

from flatgate.edge_translator.responses.endpoint import (
    ResponsesApi,
    delete_answer,
    input_items_answer,
    retrieve_answer,
)
from flatgate.edge_translator.responses.items import encode_items
from flatgate.edge_translator.responses.store import StoredResponses, _group
from flatgate.edge_translator.responses.translate import write_request
from flatgate.proxy.apis.errors import openai_body
from flatgate.proxy.apis.openai_responses.request import Decoded
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.limits import MemoryStore, StateSection
from flatgate.proxy.wire.chunk.frames import Chunk, ToolCallDelta, Usage
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.schema import FinishReason
from tests.edge.responses.common import Budget, decoded

STOP = FinishReason.STOP


@pytest.fixture
async def api() -> AsyncIterator[ResponsesApi]:
    store = MemoryStore()
    yield ResponsesApi(StoredResponses(store, StateSection()))
    await store.aclose()


async def turn(
    api: ResponsesApi, req: Decoded, *chunks: Chunk, tenant: str = "t"
) -> tuple[str, Request]:
    """One whole answer through the API's own steps: its id, and what it wrote."""
    rid = api.new_id()
    req = await api.prepare(req, tenant=tenant, response_id=rid, budget=Budget())
    wire = read_request(write_request(req, provider=0, model_name="m"))
    asked = api.asked(req, rid, rid, "m")
    await api.admitted(asked, tenant=tenant)
    folding = api.aggregator(asked, 1)
    for c in chunks:
        folding.feed(c)
    await api.finish(asked, folding, tenant=tenant)
    return rid, wire


async def stored(api: ResponsesApi, rid: str, tenant: str = "t") -> dict[str, Any] | None:
    assert api.store is not None
    raw = await api.store.response(tenant, rid)
    return None if raw is None else json.loads(raw)


async def test_a_stored_response_chains_into_the_next_request(api: ResponsesApi) -> None:
    first, _ = await turn(
        api, decoded(input="Tell me a joke."), Chunk(content="Why did...", finish_reason=STOP)
    )
    body = await stored(api, first)
    assert body is not None and body["id"] == first and body["status"] == "completed"
    sdk.Response.model_validate(body)
    _, wire = await turn(
        api,
        decoded(input="Another.", previous_response_id=first),
        Chunk(content="ok", finish_reason=STOP),
    )
    assert [(m.role, m.content) for m in wire.messages] == [
        ("user", "Tell me a joke."),
        ("assistant", "Why did..."),
        ("user", "Another."),
    ]


async def test_a_tool_round_trip_by_previous_response_id(api: ResponsesApi) -> None:
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    first, _ = await turn(
        api,
        decoded(input="Weather in Paris?", tools=tools),
        Chunk(tool_calls=(ToolCallDelta(0, "call_1", "get_weather", '{"city":"Paris"}'),)),
        Chunk(finish_reason=FinishReason.TOOL_CALLS, usage=Usage(3, 4)),
    )
    output = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    second, wire = await turn(
        api,
        decoded(input=[output], tools=tools, previous_response_id=first),
        Chunk(content="It is sunny.", finish_reason=STOP),
    )
    user, call, result = wire.messages
    assert (user.role, user.content) == ("user", "Weather in Paris?")
    assert [(c.id, c.function.name, c.function.arguments) for c in call.tool_calls or ()] == [
        ("call_1", "get_weather", '{"city":"Paris"}')
    ]
    assert (result.role, result.tool_call_id, result.content) == ("tool", "call_1", "sunny")
    # The chain grows: the third request sees all of it.
    _, wire = await turn(
        api,
        decoded(input="Thanks", previous_response_id=second),
        Chunk(content="!", finish_reason=STOP),
    )
    assert [m.role for m in wire.messages] == ["user", "assistant", "tool", "assistant", "user"]


async def test_an_unknown_previous_response_is_a_404_naming_it(api: ResponsesApi) -> None:
    with pytest.raises(FlatgateError) as caught:
        await api.prepare(
            decoded(previous_response_id="resp_nope"),
            tenant="t",
            response_id="resp_x",
            budget=Budget(),
        )
    err = caught.value
    assert (err.status, err.code.code, err.param) == (
        404,
        "previous_response_not_found",
        "previous_response_id",
    )
    assert json.loads(openai_body(err))["error"]["type"] == "invalid_request_error"


async def test_another_tenants_response_is_not_found(api: ResponsesApi) -> None:
    first, _ = await turn(api, decoded(), Chunk(content="x", finish_reason=STOP), tenant="a")
    with pytest.raises(FlatgateError) as caught:
        await api.prepare(
            decoded(previous_response_id=first), tenant="b", response_id="resp_x", budget=Budget()
        )
    assert caught.value.code is codes.PREVIOUS_RESPONSE_NOT_FOUND
    assert await stored(api, first, tenant="b") is None


async def test_store_false_stores_nothing(api: ResponsesApi) -> None:
    first, _ = await turn(api, decoded(store=False), Chunk(content="x", finish_reason=STOP))
    assert await stored(api, first) is None
    assert api.store is not None and await api.store.input_items("t", first) is None


async def test_without_a_store_nothing_is_kept_and_no_chain_is_found() -> None:
    bare = ResponsesApi()
    rid, _ = await turn(bare, decoded(), Chunk(content="x", finish_reason=STOP))
    with pytest.raises(FlatgateError) as caught:
        await bare.prepare(
            decoded(previous_response_id=rid), tenant="t", response_id="resp_y", budget=Budget()
        )
    assert caught.value.status == 404


async def test_a_hosted_output_item_is_kept_but_not_carried(api: ResponsesApi) -> None:
    call = {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search"},
    }
    first, _ = await turn(
        api,
        decoded(input="Search."),
        Chunk(extras=json.dumps({"output_item": call}), extras_dialect=3),
        Chunk(content="Found.", finish_reason=STOP),
    )
    body = await stored(api, first)
    assert body is not None and body["output"][0] == call
    _, wire = await turn(
        api,
        decoded(input="More.", previous_response_id=first),
        Chunk(content="k", finish_reason=STOP),
    )
    assert [m.content for m in wire.messages] == ["Search.", "Found.", "More."]


async def test_the_stored_input_items_and_their_list(api: ResponsesApi) -> None:
    items = [
        {"role": "user", "content": "a"},
        {"type": "message", "id": "msg_mine", "role": "assistant", "content": "b"},
        {"role": "user", "content": [{"type": "input_text", "text": "c"}]},
    ]
    first, _ = await turn(api, decoded(input=items), Chunk(content="d", finish_reason=STOP))
    assert api.store is not None
    raw = await api.store.input_items("t", first)
    status, body = input_items_answer(raw, first)
    assert status == 200
    page = sdk.ResponseItemList.model_validate_json(body)
    assert [i.type for i in page.data] == ["message"] * 3
    texts = [i.model_dump()["content"][0]["text"] for i in page.data]
    assert texts == ["c", "b", "a"]  # desc by default: the last first
    assert page.data[1].id == "msg_mine"
    assert all(i.id.startswith("msg_") for i in page.data)
    assert page.first_id == page.data[0].id and page.last_id == page.data[-1].id
    assert not page.has_more
    _, body = input_items_answer(raw, first, "order=asc&limit=2")
    page = sdk.ResponseItemList.model_validate_json(body)
    assert [i.model_dump()["content"][0]["text"] for i in page.data] == ["a", "b"]
    assert page.has_more
    _, body = input_items_answer(raw, first, f"order=asc&after={page.last_id}")
    assert [i["content"][0]["text"] for i in json.loads(body)["data"]] == ["c"]
    for bad, param in (("limit=0", "limit"), ("limit=x", "limit"), ("order=up", "order")):
        status, body = input_items_answer(raw, first, bad)
        assert status == 400 and json.loads(body)["error"]["param"] == param


async def test_retrieve_and_delete(api: ResponsesApi) -> None:
    first, _ = await turn(api, decoded(), Chunk(content="x", finish_reason=STOP))
    assert api.store is not None
    status, body = retrieve_answer(await api.store.response("t", first), first)
    assert status == 200 and json.loads(body)["id"] == first
    status, body = delete_answer(await api.store.delete("t", first), first)
    assert (status, json.loads(body)) == (200, {"id": first, "object": "response", "deleted": True})
    status, body = retrieve_answer(await api.store.response("t", first), first)
    assert status == 404 and json.loads(body)["error"]["code"] == "response_not_found"
    assert delete_answer(False, first)[0] == 404
    assert input_items_answer(None, first)[0] == 404


async def test_a_failed_stream_is_stored_as_failed(api: ResponsesApi) -> None:
    req = await api.prepare(decoded(stream=True), tenant="t", response_id="resp_f", budget=Budget())
    asked = api.asked(req, "resp_f", "resp_f", "m")
    await api.admitted(asked, tenant="t")
    renderer = api.renderer(asked, 1)
    renderer.feed(Chunk(content="par"))
    await api.finish(asked, renderer, tenant="t")  # ended without finishing
    body = await stored(api, "resp_f")
    assert body is not None and body["status"] == "failed"
    assert body["output"][0]["content"][0]["text"] == "par"


async def test_a_chain_keeps_the_encrypted_reasoning_the_client_did_not_see(
    api: ResponsesApi,
) -> None:
    part = ReasoningPart(opaque=b"gAAAA-secret", dialect=3, id="rs_b")
    req = await api.prepare(
        decoded(input="Think."), tenant="t", response_id="resp_r", budget=Budget()
    )
    asked = api.asked(req, "resp_r", "resp_r", "m")
    await api.admitted(asked, tenant="t")
    folding = api.aggregator(asked, 1)
    for chunk in (
        Chunk(reasoning="hmm"),
        Chunk(reasoning_part=part),
        Chunk(content="Done.", finish_reason=STOP),
    ):
        folding.feed(chunk)
    seen = json.loads(folding.body())
    assert "encrypted_content" not in seen["output"][0]  # not asked for
    await api.finish(asked, folding, tenant="t")
    _, wire = await turn(
        api,
        decoded(input="Again.", previous_response_id="resp_r"),
        Chunk(content="k", finish_reason=STOP),
    )
    assert wire.messages[1].reasoning is not None
    (reasoning,) = wire.messages[1].reasoning
    assert reasoning.opaque == b"gAAAA-secret" and reasoning.text == "hmm"


async def test_a_chain_stores_what_it_continues_by_reference(api: ResponsesApi) -> None:
    """A chained response's stored input is its whole input, as one JSON list
    of the items written (what ``input_items`` lists), and in a memory store
    it holds the previous input's bytes themselves, not a copy."""
    first, _ = await turn(api, decoded(input="p" * 5000), Chunk(content="one", finish_reason=STOP))
    budget = Budget()
    req = await api.prepare(
        decoded(input="second", previous_response_id=first),
        tenant="t",
        response_id="resp_2",
        budget=budget,
    )
    # The chain is charged as if sent: the stored input and output's bytes.
    assert [param for _, param in budget.charged] == ["tools", "previous_response_id"]
    assert budget.charged[1][0] > 5000
    asked = api.asked(req, "resp_2", "resp_2", "m")
    await api.admitted(asked, tenant="t")
    assert api.store is not None
    stored_input = await api.store.input_items("t", "resp_2")
    assert stored_input is not None
    got, want = json.loads(stored_input), json.loads(encode_items(req.items))
    # The same items; the new one's id is made as it is stored (not sent).
    assert got[:-1] == want[:-1] and len(got) == len(want) == 3
    assert {**got[-1], "id": ""} == {**want[-1], "id": ""}
    store = api.store._source()[0]
    assert isinstance(store, MemoryStore)
    previous = await store.get_pieces(f"{_group('t')}:{first}:input")
    chained = await store.get_pieces(f"{_group('t')}:resp_2:input")
    assert previous is not None and chained is not None
    assert any(p is previous[1] for p in chained)  # the first input's bytes, shared


async def test_a_refused_request_keeps_nothing(api: ResponsesApi) -> None:
    """``prepare`` stores nothing: only ``admitted`` does."""
    req = await api.prepare(decoded(input="x"), tenant="t", response_id="resp_n", budget=Budget())
    api.asked(req, "resp_n", "resp_n", "m")  # and then refused: admitted never runs
    assert api.store is not None and await api.store.input_items("t", "resp_n") is None


async def test_a_namespace_is_charged_for_its_description_copies(api: ResponsesApi) -> None:
    group = {
        "type": "namespace",
        "name": "ns",
        "description": "d" * 100,
        "tools": [{"type": "function", "name": f"f{i}"} for i in range(5)],
    }
    budget = Budget()
    req = await api.prepare(
        decoded(tools=[group], store=False), tenant="t", response_id="r", budget=budget
    )
    assert budget.charged == [(5 * 102, "tools")]
    assert [spec[1] for spec in req.tools] == [b"d" * 100] * 5
