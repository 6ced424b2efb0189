"""``backends.bedrock.converse.encode_converse``: the Converse body a wire
request becomes. Every body is validated by botocore's ParamValidator over
the ``Converse`` input shape (``converse_helpers.validate``); the documented
tool-use exchange is a golden file (``golden/README.md``)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.bedrock.converse import encode_converse
from flatgate.proxy.backends.extras import UnsupportedField
from flatgate.proxy.wire.request.decode import Request
from tests.backends.bedrock.converse_helpers import golden, messages_request, validate
from tests.backends.helpers import request, user

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000")
PDF = b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\n%%EOF"
TOP_SONG = golden("tool_use_request.json")["toolConfig"]["tools"][0]["toolSpec"]


def encode(
    req: Request, *, drop: bool = False, default: int | None = None
) -> tuple[dict[str, Any], list[str]]:
    omitted: list[str] = []
    body = encode_converse(req, omitted, drop, max_tokens_default=default)
    return validate(body), omitted


def data_url(media: str, data: bytes) -> str:
    return f"data:{media};base64,{base64.b64encode(data).decode()}"


def top_song_tool() -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": TOP_SONG["name"],
            "description": TOP_SONG["description"],
            "parameters": TOP_SONG["inputSchema"]["json"],
        },
    }


# -- the documented exchange ---------------------------------------------------


def test_the_documented_tool_use_request() -> None:
    req = request(
        {
            "model": "m",
            "messages": [user("What is the most popular song on WZPZ?")],
            "tools": [top_song_tool()],
        }
    )
    body, omitted = encode(req)
    assert body == golden("tool_use_request.json")
    assert omitted == []


def test_the_documented_tool_result_request() -> None:
    result = json.dumps({"song": "Elemental Hotel", "artist": "8 Storey Hike"})
    req = request(
        {
            "model": "m",
            "messages": [
                user("What is the most popular song on WZPZ?"),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
                            "type": "function",
                            "function": {"name": "top_song", "arguments": '{"sign": "WZPZ"}'},
                        }
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
                    "content": result,
                },
            ],
            "tools": [top_song_tool()],
        }
    )
    body, _ = encode(req)
    assert body["messages"] == golden("tool_result_request.json")["messages"]


# -- the conversation ------------------------------------------------------------


def test_system_and_developer_messages_become_system_blocks_and_roles_merge() -> None:
    req = request(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "Be brief."},
                user("Hi"),
                user("there"),
                {"role": "developer", "content": "Use French."},
                {"role": "assistant", "content": "Salut"},
                {"role": "assistant", "content": ""},
            ],
        }
    )
    body, _ = encode(req)
    assert body["system"] == [{"text": "Be brief."}, {"text": "Use French."}]
    assert body["messages"] == [
        {"role": "user", "content": [{"text": "Hi"}, {"text": "there"}]},
        {"role": "assistant", "content": [{"text": "Salut"}]},
    ]


def test_sampling_parameters_and_stop_sequences() -> None:
    req = request(
        {
            "model": "m",
            "messages": [user("Hi")],
            "max_tokens": 300,
            "temperature": 0.5,
            "top_p": 0.9,
            "stop": ["END", "STOP"],
        }
    )
    body, _ = encode(req, default=4096)
    assert body["inferenceConfig"] == {
        "maxTokens": 300,
        "temperature": 0.5,
        "topP": 0.9,
        "stopSequences": ["END", "STOP"],
    }


def test_max_tokens_default_and_none() -> None:
    req = request({"model": "m", "messages": [user("Hi")]})
    assert encode(req, default=1000)[0]["inferenceConfig"] == {"maxTokens": 1000}
    assert "inferenceConfig" not in encode(req)[0]


def test_a_failed_tool_result_and_results_before_text() -> None:
    req = request(
        {
            "model": "m",
            "messages": [
                user("go"),
                {
                    "role": "assistant",
                    "content": "Calling.",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": ""},
                        },
                        {
                            "id": "c2",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a":1}'},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "boom"},
                {"role": "tool", "tool_call_id": "c2", "content": "ok"},
            ],
            "tools": [{"type": "function", "function": {"name": "f"}}],
        }
    )
    body, _ = encode(req)
    assert body["messages"][1]["content"] == [
        {"text": "Calling."},
        {"toolUse": {"toolUseId": "c1", "name": "f", "input": {}}},
        {"toolUse": {"toolUseId": "c2", "name": "f", "input": {"a": 1}}},
    ]
    results = body["messages"][2]["content"]
    assert [r["toolResult"]["toolUseId"] for r in results] == ["c1", "c2"]
    assert body["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"] == {"json": {"type": "object"}}


def test_tool_arguments_that_are_not_an_object_are_refused() -> None:
    req = request(
        {
            "model": "m",
            "messages": [
                user("go"),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "[1]"},
                        }
                    ],
                },
            ],
        }
    )
    with pytest.raises(Untranslatable, match=r"messages\[1\]"):
        encode(req)


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"auto": {}}),
        ("required", {"any": {}}),
        ({"type": "function", "function": {"name": "top_song"}}, {"tool": {"name": "top_song"}}),
    ],
)
def test_tool_choice(choice: Any, expected: dict[str, Any]) -> None:
    req = request(
        {"model": "m", "messages": [user("Hi")], "tools": [top_song_tool()], "tool_choice": choice}
    )
    assert encode(req)[0]["toolConfig"]["toolChoice"] == expected


def test_tool_choice_none_sends_no_tools_and_is_refused_with_tool_history() -> None:
    req = request(
        {"model": "m", "messages": [user("Hi")], "tools": [top_song_tool()], "tool_choice": "none"}
    )
    assert "toolConfig" not in encode(req)[0]
    history = request(
        {
            "model": "m",
            "messages": [
                user("go"),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "top_song", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "x"},
            ],
            "tools": [top_song_tool()],
            "tool_choice": "none",
        }
    )
    with pytest.raises(Untranslatable, match="tool_choice") as err:
        encode(history)
    assert err.value.param == "tool_choice"
    body, omitted = encode(history, drop=True)
    assert "toolChoice" not in body["toolConfig"] and omitted == ["tool_choice"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("seed", 7),
        ("presence_penalty", 0.5),
        ("frequency_penalty", 0.5),
        ("n", 2),
        ("parallel_tool_calls", False),
        ("temperature", 1.5),
    ],
)
def test_fields_converse_has_no_place_for_are_refused_by_name(field: str, value: Any) -> None:
    req = request(
        {"model": "m", "messages": [user("Hi")], "tools": [top_song_tool()], field: value}
    )
    with pytest.raises(Untranslatable) as err:
        encode(req)
    assert err.value.param == field
    assert encode(req, drop=True)[1] == [field]


def test_response_format_json_schema_maps_and_json_object_is_refused() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    req = request(
        {
            "model": "m",
            "messages": [user("Hi")],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "thing", "description": "A thing", "schema": schema},
            },
        }
    )
    out = encode(req)[0]["outputConfig"]["textFormat"]
    assert out["type"] == "json_schema"
    js = out["structure"]["jsonSchema"]
    assert (
        json.loads(js["schema"]) == schema
        and js["name"] == "thing"
        and js["description"] == "A thing"
    )
    obj = request(
        {"model": "m", "messages": [user("Hi")], "response_format": {"type": "json_object"}}
    )
    with pytest.raises(Untranslatable, match="response_format"):
        encode(obj)
    text = request({"model": "m", "messages": [user("Hi")], "response_format": {"type": "text"}})
    assert "outputConfig" not in encode(text)[0]


def test_metadata_and_user_become_request_metadata() -> None:
    req = request(
        {"model": "m", "messages": [user("Hi")], "metadata": {"team": "search"}, "user": "u-42"}
    )
    assert encode(req)[0]["requestMetadata"] == {"team": "search", "user": "u-42"}
    bad = request({"model": "m", "messages": [user("Hi")], "metadata": {"team": "<script>"}})
    with pytest.raises(Untranslatable, match=r"metadata\.team"):
        encode(bad)


def test_a_name_is_named_as_left_out() -> None:
    req = request({"model": "m", "messages": [{"role": "user", "content": "Hi", "name": "ann"}]})
    assert encode(req)[1] == ["name"]


def test_chat_extras_are_refused_by_name() -> None:
    req = request({"model": "m", "messages": [user("Hi")], "logit_bias": {"1": 2}})
    with pytest.raises(UnsupportedField) as err:
        encode(req)
    assert err.value.param == "logit_bias"
    assert encode(req, drop=True)[1] == ["logit_bias"]


# -- content parts ---------------------------------------------------------------------


def _parts(*parts: dict[str, Any]) -> Request:
    return request(
        {
            "model": "m",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Look:"}, *parts]}],
        }
    )


@pytest.mark.parametrize("media", ["image/png", "image/jpg"])
def test_an_image_is_sent_as_bytes_with_its_format(media: str) -> None:
    jpeg = b"\xff\xd8\xff\xe0" + bytes(20)
    data = PNG if media != "image/jpg" else jpeg
    req = _parts({"type": "image_url", "image_url": {"url": data_url(media, data)}})
    block = encode(req)[0]["messages"][0]["content"][1]
    assert block["image"]["format"] == ("jpeg" if media == "image/jpg" else "png")
    assert base64.b64decode(block["image"]["source"]["bytes"]) == data


def test_an_image_url_cannot_be_sent_and_is_refused_naming_the_part() -> None:
    req = _parts({"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}})
    with pytest.raises(Untranslatable, match=r"messages\[0\]\.content\[1\]") as err:
        encode(req)
    assert err.value.param == "messages[0].content[1]"
    body, omitted = encode(req, drop=True)
    assert body["messages"][0]["content"] == [{"text": "Look:"}]
    assert omitted == ["messages[0].content[1]"]


def test_an_image_detail_is_named() -> None:
    req = _parts(
        {"type": "image_url", "image_url": {"url": data_url("image/png", PNG), "detail": "high"}}
    )
    assert encode(req)[1] == ["detail"]


def test_a_pdf_file_is_a_document_with_a_name_the_service_allows() -> None:
    req = _parts(
        {
            "type": "file",
            "file": {
                "filename": "report_2024.v2.pdf",
                "file_data": data_url("application/pdf", PDF),
            },
        }
    )
    block = encode(req)[0]["messages"][0]["content"][1]["document"]
    assert block["format"] == "pdf"
    assert block["name"] == "report 2024 v2 pdf"
    assert base64.b64decode(block["source"]["bytes"]) == PDF


def test_a_document_of_no_converse_format_is_refused() -> None:
    req = _parts(
        {
            "type": "file",
            "file": {"filename": "x.bin", "file_data": data_url("application/zip", b"PK\x03\x04")},
        }
    )
    with pytest.raises(Untranslatable, match=r"messages\[0\]\.content\[1\]"):
        encode(req)


def test_a_file_id_is_refused() -> None:
    req = _parts({"type": "file", "file": {"file_id": "file-abc"}})
    with pytest.raises(Untranslatable, match="file id"):
        encode(req)


def test_audio_is_an_audio_block() -> None:
    wav = b"RIFF\x00\x00\x00\x00WAVEfmt "
    req = _parts(
        {
            "type": "input_audio",
            "input_audio": {"data": base64.b64encode(wav).decode(), "format": "wav"},
        }
    )
    block = encode(req)[0]["messages"][0]["content"][1]["audio"]
    assert block["format"] == "wav" and base64.b64decode(block["source"]["bytes"]) == wav


# -- the Messages dialect: thinking, cache points, betas ------------------------------


SIGNED = {"type": "thinking", "thinking": "Let me think.", "signature": "c2lnbmF0dXJl"}
REDACTED = {"type": "redacted_thinking", "data": base64.b64encode(b"\x00secret").decode()}


def test_claude_thinking_round_trips_as_reasoning_content() -> None:
    req = messages_request(
        {
            "model": "claude",
            "max_tokens": 2000,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": [SIGNED, REDACTED, {"type": "text", "text": "4"}]},
                {"role": "user", "content": "And 3+3?"},
            ],
        }
    )
    body, omitted = encode(req)
    assert body["messages"][1]["content"] == [
        {
            "reasoningContent": {
                "reasoningText": {"text": "Let me think.", "signature": "c2lnbmF0dXJl"}
            }
        },
        {"reasoningContent": {"redactedContent": REDACTED["data"]}},
        {"text": "4"},
    ]
    assert body["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": 1024}
    }
    assert body["inferenceConfig"]["maxTokens"] == 2000
    assert omitted == []


def test_openai_reasoning_is_left_out_and_named() -> None:
    from flatgate.proxy.wire.parts import ReasoningPart
    from flatgate.proxy.wire.schema import ApiDialect

    req = request(
        {"model": "m", "messages": [user("a"), {"role": "assistant", "content": "b"}, user("c")]}
    )
    req.messages[1].reasoning = [
        ReasoningPart(text="t", opaque=b"enc", dialect=int(ApiDialect.OPENAI_RESPONSES))
    ]
    body, omitted = encode(req)
    assert body["messages"][1]["content"] == [{"text": "b"}]
    assert omitted == ["reasoning"]


def test_cache_control_becomes_cache_points_and_betas_and_top_k_travel() -> None:
    req = messages_request(
        {
            "model": "claude",
            "max_tokens": 100,
            "top_k": 40,
            "system": [
                {
                    "type": "text",
                    "text": "Long rules.",
                    "cache_control": {"type": "ephemeral", "ttl": "1h"},
                }
            ],
            "tools": [
                {
                    "name": "top_song",
                    "input_schema": {"type": "object"},
                    "cache_control": {"type": "ephemeral"},
                }
            ],
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}
                    ],
                }
            ],
        },
        beta="interleaved-thinking-2025-05-14",
    )
    body, omitted = encode(req)
    assert body["system"] == [
        {"text": "Long rules."},
        {"cachePoint": {"type": "default", "ttl": "1h"}},
    ]
    assert body["toolConfig"]["tools"][1] == {"cachePoint": {"type": "default"}}
    assert body["messages"][0]["content"] == [{"text": "Hi"}, {"cachePoint": {"type": "default"}}]
    assert body["additionalModelRequestFields"] == {
        "top_k": 40,
        "anthropic_beta": ["interleaved-thinking-2025-05-14"],
    }
    assert omitted == []


def test_messages_fields_without_a_converse_form_are_refused() -> None:
    req = messages_request(
        {
            "model": "claude",
            "max_tokens": 10,
            "container": "c-1",
            "messages": [{"role": "user", "content": "Hi"}],
        }
    )
    with pytest.raises(UnsupportedField) as err:
        encode(req)
    assert err.value.param == "container"


def test_a_turn_puts_its_tool_results_before_its_text() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    req = request(
        {
            "model": "m",
            "messages": [
                user("go"),
                {"role": "assistant", "content": None, "tool_calls": [call]},
                user("note"),
                {"role": "tool", "tool_call_id": "c1", "content": "done"},
            ],
            "tools": [{"type": "function", "function": {"name": "f"}}],
        }
    )
    turn = encode(req)[0]["messages"][2]["content"]
    assert [next(iter(b)) for b in turn] == ["toolResult", "text"]


def test_a_messages_tools_and_blocks_own_fields_are_named_as_the_client_wrote_them() -> None:
    """A tool's ``defer_loading`` and ``eager_input_streaming`` and a text's
    ``citations`` are named as fields of the client's tool or block (as at an
    ``openai`` backend), never as flatgate's own ``$tools`` / ``$blocks``."""
    tool: dict[str, Any] = {
        "name": "lookup",
        "input_schema": {"type": "object"},
        "defer_loading": True,
        "eager_input_streaming": True,
    }
    body: dict[str, Any] = {
        "model": "nova",
        "max_tokens": 100,
        "tools": [tool],
        "messages": [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "text",
                        "text": "cited",
                        "citations": [
                            {
                                "type": "char_location",
                                "cited_text": "c",
                                "document_index": 0,
                                "document_title": "d",
                                "start_char_index": 0,
                                "end_char_index": 1,
                            }
                        ],
                    }
                ],
            },
            {"role": "user", "content": "more"},
        ],
    }
    sent, omitted = encode(messages_request(body))
    assert sent["toolConfig"]["tools"][0]["toolSpec"]["name"] == "lookup"
    assert sorted(omitted) == [
        "messages.content.citations",
        "tools.defer_loading",
        "tools.eager_input_streaming",
    ]
    # What maps to nothing is named even when the backend refuses the rest.
    tool["input_examples"] = [{"q": "x"}]
    with pytest.raises(UnsupportedField) as info:
        encode(messages_request(body))
    assert info.value.param == "tools.input_examples"
