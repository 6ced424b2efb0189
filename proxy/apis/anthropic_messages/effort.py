"""A Messages request's per-message effort: the effort its answer is given.

Anthropic's per-message effort (the ``mid-conversation-output-config-2026-07-01``
beta; Claude Code 2.1.332 sends it with its default model under
``per-turn-control-2026-07-01``) is a ``system`` message in ``messages`` whose
``output_config`` holds an ``effort``: it sets the effort from a turn on
without changing the top-level ``output_config`` (which keeps a prompt cache's
prefix). Where the message stands says from which turn (Anthropic's
"Per-message effort" page): right after a user turn with new input, from the
answer to that turn; anywhere else, from the next user turn with new input (a
user turn of ``tool_result`` blocks alone is not new input); and it holds
until a later one changes it.

flatgate sends a backend one request for one answer, so it maps the
messages' efforts onto that answer: ``output_config_in_force`` is the
request's top-level ``output_config`` with the effort of the last such
message that has taken effect by the request's last turn of new input, or
``None`` when none has (the top-level one stands). A backend is sent that as
the request's ``output_config`` (an Anthropic backend as sent, an
OpenAI-compatible one as its reasoning effort), and the message without it.
An ``output_config`` on a ``user`` or ``assistant`` message, a key in it but
``effort``, or one that is not an object, is refused as Anthropic refuses
it, naming it (``messages.1.output_config.format: Extra inputs are not
permitted``: the format stays top-level). Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.anthropic_messages.blocks import Message, ToolResultBlock
from flatgate.proxy.apis.anthropic_messages.request import MessagesRequest
from flatgate.proxy.apis.errors import InvalidRequest

__all__ = ["output_config_in_force"]

_decode_object = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_encode = msgspec.json.Encoder().encode
_NULL = b"null"


def _new_input(m: Message) -> bool:
    """A user turn with something besides tool results."""
    if m.role != "user":
        return False
    content = m.content
    return isinstance(content, str) or any(type(b) is not ToolResultBlock for b in content)


def _object(raw: msgspec.Raw, where: str) -> dict[str, msgspec.Raw]:
    try:
        return _decode_object(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise InvalidRequest(f"{where}: Input should be an object", param=where) from None


def _effort(m: Message, i: int) -> msgspec.Raw | None:
    """Message ``i``'s effort (``None``: it sets none), its ``output_config`` checked."""
    where = f"messages.{i}.output_config"
    if m.role != "system":
        raise InvalidRequest(f"{where}: Extra inputs are not permitted", param=where)
    fields = _object(m.output_config, where)
    for key in fields:
        if key != "effort":
            path = f"{where}.{key}"
            raise InvalidRequest(f"{path}: Extra inputs are not permitted", param=path)
    effort = fields.get("effort")
    return None if effort is None or bytes(effort) == _NULL else effort


def output_config_in_force(req: MessagesRequest) -> msgspec.Raw | None:
    """The ``output_config`` ``req``'s answer is given (see the module
    docstring); ``None`` when no message sets an effort that applies to it."""
    messages = req.messages
    if not any(m.output_config for m in messages):
        return None
    last = max((i for i, m in enumerate(messages) if _new_input(m)), default=-1)
    effort = None
    for i, m in enumerate(messages):
        if not m.output_config:
            continue
        found = _effort(m, i)
        if found is not None and ((i > 0 and _new_input(messages[i - 1])) or i < last):
            effort = found
    if effort is None:
        return None
    top = _object(req.output_config, "output_config") if req.output_config else {}
    return msgspec.Raw(_encode({**top, "effort": effort}))
