"""``decoding.strict_twin`` and ``decoding.respelled``: a vendor model read
strictly at every depth, and a protobuf JSON body's other spelling, on small
Structs of their own and on the Gemini model they serve."""

from __future__ import annotations

import msgspec
import pytest

from flatgate.proxy.apis.decoding import respelled, strict_twin
from flatgate.proxy.apis.gemini.content import Blob
from flatgate.proxy.apis.gemini.request import GenerateContentRequest


class Leaf(msgspec.Struct, rename="camel"):
    leaf_name: str = ""


class Node(msgspec.Struct, rename="camel"):
    kids: list[Leaf] = msgspec.field(default_factory=list)
    one: Leaf | None = None
    by_key: dict[str, Leaf] | None = None
    free: msgspec.Raw = msgspec.Raw()
    needed: Leaf = msgspec.field(default_factory=Leaf)


class Loop(msgspec.Struct):
    again: Loop | None = None


def _unknown(tp: type, body: bytes) -> str:
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.json.decode(body, type=tp)
    return str(caught.value)


def test_the_twin_refuses_an_unknown_member_at_every_depth_and_reads_the_rest() -> None:
    twin = strict_twin(Node)
    body = b'{"kids":[{"leafName":"a"}],"one":{"leafName":"b"},"byKey":{"k":{}},"free":{"x":1}}'
    node = msgspec.json.decode(body, type=twin)
    assert isinstance(node, Node) and node.kids[0].leaf_name == "a"
    assert msgspec.json.encode(node) == msgspec.json.encode(msgspec.json.decode(body, type=Node))
    assert _unknown(twin, b'{"x":1}') == "Object contains unknown field `x`"
    for body, at in [
        (b'{"kids":[{},{"y":1}]}', "$.kids[1]"),
        (b'{"one":{"y":1}}', "$.one"),
        (b'{"byKey":{"k":{"y":1}}}', "$.byKey[...]"),
        (b'{"needed":{"y":1}}', "$.needed"),
    ]:
        assert _unknown(twin, body) == f"Object contains unknown field `y` - at `{at}`"
    # The lenient model itself is untouched, and a Raw is never judged.
    assert msgspec.json.decode(b'{"one":{"y":1},"z":2}', type=Node).one == Leaf()
    assert bytes(msgspec.json.decode(b'{"free":{"y":1}}', type=twin).free) == b'{"y":1}'


def test_the_top_may_take_any_member_and_twins_are_shared() -> None:
    made: dict[type, type] = {}
    strict, top_free = strict_twin(Node, made), strict_twin(Node, made, here=False)
    assert made[Node] is strict and strict_twin(Leaf, made) is made[Leaf]
    assert msgspec.json.encode(msgspec.json.decode(b'{"z":1}', type=top_free)) == (
        msgspec.json.encode(Node())
    )
    assert "at `$.one`" in _unknown(top_free, b'{"z":1,"one":{"y":1}}')
    with pytest.raises(TypeError, match="holds itself"):
        strict_twin(Loop)


def test_the_twins_keep_the_models_own_spellings_and_post_init() -> None:
    twin = strict_twin(GenerateContentRequest)
    body = b'{"contents":[{"parts":[{"inlineData":{"mime_type":"image/png","data":"AA"}}]}]}'
    [part] = msgspec.json.decode(body, type=twin).contents[0].parts
    assert isinstance(part.inline_data, Blob)
    assert msgspec.json.encode(part.inline_data) == b'{"mimeType":"image/png","data":"AA"}'
    assert "mimeType" in _unknown(twin, b'{"contents":[{"parts":[{"inlineData":{"data":"AA"}}]}]}')


def test_respelled_renames_to_the_read_name_and_leaves_raw_values_alone() -> None:
    tree = {
        "kids": [{"leaf_name": "a"}, {"leafName": "b", "leaf_name": "c"}],
        "by_key": {"some_key": {"leaf_name": "d"}},
        "free": {"leaf_name": 1},
        "other_thing": {"leaf_name": 2},
    }
    assert respelled(tree, Node) == {
        "kids": [{"leafName": "a"}, {"leafName": "b"}],
        "byKey": {"some_key": {"leafName": "d"}},
        "free": {"leaf_name": 1},
        "other_thing": {"leaf_name": 2},
    }
    assert respelled("text", Node) == "text" and respelled([1], Node | None) == [1]
