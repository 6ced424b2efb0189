"""What the Converse tests share: botocore's validator over a body we write,
Messages-dialect requests, and event-stream frames built to the spec."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import botocore.session
from botocore.validate import ParamValidator

from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.proxy.apis.anthropic_messages.request import decode_messages
from flatgate.proxy.backends.bedrock.eventstream import encode_message
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.schema import Provider

GOLDEN = Path(__file__).parent / "golden"
_MODEL = botocore.session.get_session().get_service_model("bedrock-runtime")
_VALIDATOR = ParamValidator()


def golden(name: str) -> Any:
    return json.loads((GOLDEN / name).read_text())


def _blobs_to_bytes(value: Any, shape: Any) -> Any:
    """The JSON value with each blob (base64 text) as bytes, as botocore's
    callers pass them."""
    kind = shape.type_name
    if kind == "blob" and isinstance(value, str):
        return base64.b64decode(value, validate=True)
    if kind == "structure" and isinstance(value, dict) and not shape.metadata.get("document"):
        return {
            k: _blobs_to_bytes(v, shape.members[k]) if k in shape.members else v
            for k, v in value.items()
        }
    if kind == "list" and isinstance(value, list):
        return [_blobs_to_bytes(v, shape.member) for v in value]
    if kind == "map" and isinstance(value, dict):
        return {k: _blobs_to_bytes(v, shape.value) for k, v in value.items()}
    return value


def validate(
    body: bytes, operation: str = "Converse", model_id: str = "amazon.nova-pro-v1:0"
) -> dict[str, Any]:
    """``body`` checked by botocore's ParamValidator against the operation's
    input (the model id added, as the URL carries it); the parsed body."""
    doc: dict[str, Any] = json.loads(body)
    assert "modelId" not in doc
    shape = _MODEL.operation_model(operation).input_shape
    params = _blobs_to_bytes({**doc, "modelId": model_id}, shape)
    report = _VALIDATOR.validate(params, shape)
    assert not report.has_errors(), report.generate_report()
    return doc


def messages_request(body: dict[str, Any], *, beta: str = "") -> Request:
    """A Messages API body as the proxy decodes it (written by the edge)."""
    headers = {"anthropic-beta": beta} if beta else None
    return read_request(
        write_messages(
            decode_messages(json.dumps(body).encode()),
            model_name="routed-model",
            provider=int(Provider.Anthropic),
            headers=headers,
        )
    )


def event(kind: str, payload: dict[str, Any]) -> bytes:
    """One ConverseStream event as AWS frames it."""
    return encode_message(
        [
            (":event-type", kind),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        json.dumps(payload).encode(),
    )


def exception(kind: str, message: str) -> bytes:
    return encode_message(
        [
            (":exception-type", kind),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        json.dumps({"message": message}).encode(),
    )
