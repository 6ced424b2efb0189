"""Stored responses with images (issue 36, item 7): a turn with a
screenshot is stored with the default bounds and a chain continues it with
the image's bytes intact; the stored input keeps the client's data URL; a
response answered but not stored for its size is a 400 saying why when a
request continues it, not a bare 404."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from collections.abc import AsyncIterator

import pytest
from PIL import Image

from flatgate.edge_translator.responses.endpoint import ResponsesApi
from flatgate.edge_translator.responses.store import StoredResponses
from flatgate.edge_translator.responses.translate import write_request
from flatgate.proxy.apis.openai_responses.request import Decoded
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.limits import MemoryStore, StateSection
from flatgate.proxy.plumbing.server_section import DEFAULT_MAX_BODY_BYTES
from flatgate.proxy.wire.chunk.frames import Chunk
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.schema import FinishReason, PartKind
from tests.edge.responses.common import Budget, decoded

MIB = 1 << 20


def screenshot(padding: int = 0) -> bytes:
    """A real PNG, ``padding`` bytes after its end (a large screenshot's
    size at no encoding cost: the header and magic numbers are what count)."""
    out = io.BytesIO()
    Image.new("RGB", (1280, 800), "navy").save(out, "PNG")
    return out.getvalue() + bytes(padding)


def with_image(image: bytes, text: str = "what is this?") -> list[dict[str, object]]:
    url = f"data:image/png;base64,{base64.b64encode(image).decode()}"
    return [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": text},
                {"type": "input_image", "image_url": url, "detail": "high"},
            ],
        }
    ]


def api_over(state: StateSection) -> tuple[ResponsesApi, MemoryStore]:
    store = MemoryStore()
    return ResponsesApi(StoredResponses(store, state)), store


@pytest.fixture
async def api() -> AsyncIterator[ResponsesApi]:
    made, store = api_over(StateSection())
    yield made
    await store.aclose()


async def turn(api: ResponsesApi, req: Decoded, tenant: str = "t") -> tuple[str, Request]:
    rid = api.new_id()
    req = await api.prepare(req, tenant=tenant, response_id=rid, budget=Budget())
    wire = read_request(write_request(req, provider=0, model_name="m"))
    asked = api.asked(req, rid, rid, "m")
    await api.admitted(asked, tenant=tenant)
    folding = api.aggregator(asked, 1)
    folding.feed(Chunk(content="A screen.", finish_reason=FinishReason.STOP))
    await api.finish(asked, folding, tenant=tenant)
    return rid, wire


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_default_stores_what_the_edge_admits() -> None:
    state = StateSection()
    # A request of the edge's largest body, and room for its answer.
    assert state.max_stored_response_bytes >= DEFAULT_MAX_BODY_BYTES + 4 * MIB
    # One such response fits a tenant's share, and a memory store's whole.
    assert state.max_stored_response_bytes <= state.max_response_bytes_per_tenant
    assert state.max_stored_response_bytes <= state.memory_max_response_bytes_total


async def test_a_screenshot_over_the_old_cap_is_stored_and_chains(api: ResponsesApi) -> None:
    image = screenshot(padding=5 * MIB)  # past the 4 MiB the cap was
    first, wire = await turn(api, decoded(input=with_image(image)))
    assert api.store is not None and api.store.stored == 1
    # The stored input is the client's JSON: the data URL's base64, as sent.
    items = json.loads(await api.store.input_items("t", first) or b"[]")
    stored_url = items[0]["content"][1]["image_url"]
    assert base64.b64decode(stored_url.split(",", 1)[1]) == image
    assert items[0]["content"][1]["detail"] == "high"
    # The next turn carries the image again, its bytes intact.
    _, wire = await turn(api, decoded(input="and now?", previous_response_id=first))
    first_message = wire.messages[0]
    (picture,) = [p for p in first_message.parts or () if p.kind == PartKind.IMAGE]
    assert digest(picture.data) == digest(image)
    assert [m.role for m in wire.messages] == ["user", "assistant", "user"]


async def test_continuing_a_response_too_large_to_store_is_a_400_saying_why() -> None:
    api, store = api_over(StateSection(max_stored_response_bytes=64 * 1024))
    try:
        first, _ = await turn(api, decoded(input=with_image(screenshot(padding=100_000))))
        assert api.store is not None
        assert api.store.refused_too_large == 1 and api.store.stored == 0
        assert await api.store.response("t", first) is None
        with pytest.raises(FlatgateError) as caught:
            await api.prepare(
                decoded(input="next", previous_response_id=first),
                tenant="t",
                response_id="resp_x",
                budget=Budget(),
            )
        err = caught.value
        assert (err.status, err.code.code, err.param) == (
            400,
            "invalid_request",
            "previous_response_id",
        )
        assert "answered but not stored" in err.message
        assert "max_stored_response_bytes" in err.message
        # Another tenant, and an id never seen, still read as not found.
        for tenant, rid in (("other", first), ("t", "resp_never")):
            with pytest.raises(FlatgateError) as caught:
                await api.prepare(
                    decoded(input="next", previous_response_id=rid),
                    tenant=tenant,
                    response_id="resp_y",
                    budget=Budget(),
                )
            assert caught.value.status == 404
    finally:
        await store.aclose()


@pytest.mark.parametrize("at_once", [True, False])
async def test_the_marker_is_kept_either_way_and_deleted_with_the_response(
    at_once: bool,
) -> None:
    store = MemoryStore()
    try:
        r = StoredResponses(store, StateSection(max_stored_response_bytes=100))
        small, big = b"[" + b"1," * 10 + b"1]", b"x" * 200
        if at_once:
            assert not await r.save("t", "resp_1", small, big)
        else:
            assert await r.save_input("t", "resp_1", small)
            assert not await r.save_response("t", "resp_1", big)
        assert await r.too_large("t", "resp_1") == len(small) + len(big)
        assert await r.too_large("t", "resp_2") is None
        assert await r.too_large("u", "resp_1") is None
        assert await r.turn("t", "resp_1") is None
        await r.delete("t", "resp_1")
        assert await r.too_large("t", "resp_1") is None
    finally:
        await store.aclose()
