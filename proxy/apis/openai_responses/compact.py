"""The Responses API's compaction (``POST /v1/responses/compact``), as every
side reads and writes it: its request, its answer, the ``compaction`` item
flatgate makes, and the mark that tells an adapter a request is one.

Owns the facts of compaction that more than one layer needs, once:

- the request (``decode_compact``): the ``POST /v1/responses`` body's
  decoder and checks (``request.decode_request``: ``model`` required, so a
  body without one is a 400 naming ``model``), held to the compact
  endpoint's fields (``COMPACT_FIELDS``: ``model``, ``input``,
  ``previous_response_id``, ``instructions``, ``prompt_cache_key``,
  ``service_tier``); a field of ``POST /v1/responses`` that asks for
  something a compaction does not do (``stream``, ``tools``,
  ``temperature``, ``store`` ...) is a 400 naming it; a field
  ``ResponsesRequest`` does not know travels in the extras, as on
  ``/v1/responses`` (the endpoint's own among them: ``COMPACT_EXTRAS``);
- the wire (``COMPACT_MARK``): the edge writes a compaction as a
  ``CompletionRequest`` whose messages are the conversation followed by one
  user message, the compaction prompt (``PROMPT``), and whose extras (dialect
  ``OpenAIResponses``) hold ``"$compact": true``. A backend that does not
  know the mark answers the prompt like any request (flatgate's own keys,
  ``extras.FLATGATE_OWN``, reach no backend); an ``openai-responses``
  backend that serves the endpoint (its ``compact`` key) is sent the
  conversation without the prompt at ``/responses/compact``, and its
  answer (``COMPACTION``) comes back as output items;
- the item flatgate makes when it summarises (``summary_item``): type
  ``compaction``, id ``cmp_...``, ``encrypted_content`` ``fgc1.`` + the
  summary's UTF-8 in URL-safe base64 (opaque to the client, as the API
  says its content is; not encrypted: it holds only what the client's
  own conversation said), and how one is read back (``summary_of``: the
  summary, or ``None`` for a compaction item another server made);
- the text a summary is sent to a backend as, in a later request
  (``summary_text``);
- another server's compaction item on the wire (``compaction_part``): a
  ``ReasoningPart`` of the Responses dialect, its ``encrypted_content`` as
  the opaque bytes, its id the item's, always ``cmp_...`` (``COMPACTION_ID``:
  OpenAI's compaction ids have it, its reasoning ids ``rs_...``); an
  ``openai-responses`` adapter writes such a part back as the ``compaction``
  item (``compaction_item``); any other backend leaves it out, as it leaves
  out reasoning of a dialect not its own, and names it (``reasoning``).

Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii

from flatgate.proxy.apis.errors import InvalidRequest, shown
from flatgate.proxy.apis.openai_responses.items import Item
from flatgate.proxy.apis.openai_responses.request import Decoded, decode_request
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.schema import ApiDialect

__all__ = [
    "COMPACTION",
    "COMPACTION_ID",
    "COMPACT_EXTRAS",
    "COMPACT_FIELDS",
    "COMPACT_MARK",
    "COMPACT_PATH",
    "PROMPT",
    "SUMMARY_PREFIX",
    "compaction_item",
    "compaction_part",
    "decode_compact",
    "summary_item",
    "summary_of",
    "summary_text",
]

COMPACT_PATH = "/v1/responses/compact"
# The ``object`` of its answer.
COMPACTION = "response.compaction"
# The fields of ``POST /v1/responses`` the endpoint's body takes too
# (OpenAI's reference), and its others, which travel in the extras.
COMPACT_FIELDS = frozenset(
    {"model", "input", "previous_response_id", "instructions", "prompt_cache_key", "service_tier"}
)
COMPACT_EXTRAS = frozenset({"prompt_cache_retention", "prompt_cache_options", "image"})
# The extras key (flatgate's own: a client's ``$`` key is refused) that marks
# a CompletionRequest as a compaction whose last message is ``PROMPT``.
COMPACT_MARK = "$compact"
SUMMARY_PREFIX = "fgc1."
# Every compaction item's id begins so (a part with this id is one).
COMPACTION_ID = "cmp_"
_RESPONSES = int(ApiDialect.OPENAI_RESPONSES)

PROMPT = (
    "Compact the conversation above so that it can continue in a new context window. "
    "Write a concise summary of what the next turn needs: the user's goals and requests, "
    "the decisions made, facts and constraints established, the work done and its results, "
    "and what is still open. Reply with the summary alone."
)
_SUMMARY_HEAD = "Summary of the earlier conversation, compacted:\n\n"


def decode_compact(body: bytes | memoryview) -> Decoded:
    """A compact request, decoded and checked; ``InvalidRequest`` naming
    the ``param`` otherwise (see the module docstring)."""
    d = decode_request(body)
    wired = d.req.__struct_fields__
    for key in d.fields:
        if key in wired and key not in COMPACT_FIELDS:
            raise InvalidRequest(
                f"Unrecognized request argument supplied: {shown(key)} (POST "
                f"{COMPACT_PATH} takes " + ", ".join(sorted(COMPACT_FIELDS)) + ")",
                param=key,
            )
    return d


def summary_item(item_id: str, summary: str) -> dict[str, str]:
    """The ``compaction`` output item flatgate makes of ``summary``."""
    body = base64.urlsafe_b64encode(summary.encode()).decode()
    return {"id": item_id, "type": "compaction", "encrypted_content": SUMMARY_PREFIX + body}


def summary_of(encrypted: str) -> str | None:
    """The summary in a ``compaction`` item's ``encrypted_content`` that
    flatgate made; ``None`` for one another server made (its own opaque
    content)."""
    if not encrypted.startswith(SUMMARY_PREFIX):
        return None
    try:
        body = encrypted[len(SUMMARY_PREFIX) :]
        return base64.b64decode(body, altchars=b"-_", validate=True).decode()
    except (binascii.Error, ValueError):
        return None


def summary_text(summary: str) -> str:
    """A summary as the message a later request sends the backend."""
    return _SUMMARY_HEAD + summary


def compaction_part(item: Item) -> ReasoningPart:
    """Another server's ``compaction`` item as the wire carries it."""
    item_id = item.id if item.id and item.id.startswith(COMPACTION_ID) else COMPACTION_ID
    opaque = (item.encrypted_content or "").encode()
    return ReasoningPart(opaque=opaque, dialect=_RESPONSES, id=item_id)


def compaction_item(part: ReasoningPart) -> Item | None:
    """The ``compaction`` item a part of ``compaction_part``'s is (``None``:
    the part is reasoning)."""
    if part.dialect != _RESPONSES or not part.id.startswith(COMPACTION_ID):
        return None
    item_id = part.id if part.id != COMPACTION_ID else None
    return Item(type="compaction", id=item_id, encrypted_content=part.opaque.decode())
