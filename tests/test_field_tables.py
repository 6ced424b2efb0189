"""Each client API's page has its request table, and the table names every
field the API's edge reads (issue 22: one table per client API).

The table is the one under a page's "The request" whose header is
``HEADER``: a row per field or header, one column per backend protocol, and
why. Its first column must name, in backticks, every top-level field of the
edge's request Struct (its wire names), every extras field the edge or the
proxy knows by name for that API (``EXTRA_FIELDS``, ``extras.NOTHING``,
``extras.FLATGATE_OWN``, the hosted tools), the API's message roles and
content part types, the headers the edge reads, and the fields it does not
know ("any other top-level field"). So a field added to a model without a
row fails here, and so does a row removed.

A name is named by a backticked word of the first column that is it, or
begins with it (``metadata.user_id`` names ``metadata``); a dotted name
(``reasoning.summary``) by the whole name, or by a row whose backticked
words hold its last part (``thinking`` (``adaptive``, ...) names
``thinking.adaptive``).
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from flatgate.proxy.apis.anthropic_messages import request as messages_models
from flatgate.proxy.apis.gemini import content as gemini_content
from flatgate.proxy.apis.gemini import request as gemini_models
from flatgate.proxy.apis.openai_chat import request as chat_models
from flatgate.proxy.apis.openai_responses import items as responses_items
from flatgate.proxy.apis.openai_responses import request as responses_models
from flatgate.proxy.backends.extras import FLATGATE_OWN, HOSTED_TOOLS, NOTHING
from flatgate.proxy.wire.schema import ApiDialect

API_DOCS = Path(__file__).resolve().parent.parent / "docs" / "api"
HEADER = [
    "field / header",
    "fbs",
    "openai",
    "openai-responses",
    "anthropic",
    "bedrock",
    "gemini",
    "vertex",
    "why",
]
UNKNOWN_ROW = "any other top-level field"
# The row for the keys no nested struct knows (pages whose edge judges them).
NESTED_ROW = "any other key in"
NESTED_PAGES = ("openai-chat.md", "openai-responses.md", "gemini.md")
# The headers every client API's edge reads.
HEADERS = ("Authorization", "x-request-id")
_CODE = re.compile(r"`([^`]+)`")
_HEAD = re.compile(r"[$A-Za-z_][\w$-]*")


def _cells(line: str) -> list[str]:
    """A table row's cells; a ``|`` inside backticks is not a separator."""
    cells: list[str] = []
    cell: list[str] = []
    code = False
    for ch in line.strip().removeprefix("|").removesuffix("|"):
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            cells.append("".join(cell).strip())
            cell = []
        else:
            cell.append(ch)
    cells.append("".join(cell).strip())
    return cells


def request_table(page: str) -> list[list[str]]:
    """The rows (cells) of ``page``'s request table, header and rule left out."""
    text = (API_DOCS / page).read_text()
    section = text.split("\n## The request\n", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("|") and _cells(line) == HEADER]
    assert len(starts) == 1, f"{page}: one request table with the header {HEADER}"
    rows = []
    for line in lines[starts[0] + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(_cells(line))
    return rows


@dataclass(frozen=True)
class Named:
    """What a table's first column names: each row's backticked words, and
    the words' leading names."""

    words: list[set[str]]
    heads: list[set[str]]
    # Every identifier in each row's backticked words.
    parts: list[set[str]]
    firsts: list[str]

    @classmethod
    def of(cls, rows: list[list[str]]) -> Named:
        words = [set(_CODE.findall(row[0])) for row in rows]
        heads = [{m.group(0) for w in ws if (m := _HEAD.match(w))} for ws in words]
        parts = [{p for w in ws for p in _HEAD.findall(w)} for ws in words]
        return cls(words, heads, parts, [row[0] for row in rows])

    def names(self, name: str) -> bool:
        if "." not in name:
            return any(name in heads for heads in self.heads)
        last = name.rsplit(".", 1)[1]
        return any(
            name in words or last in parts
            for words, parts in zip(self.words, self.parts, strict=True)
        )

    def names_header(self, header: str) -> bool:
        return any(header.lower() == h.lower() for heads in self.heads for h in heads)


def _wire_names(struct: type[msgspec.Struct]) -> list[str]:
    return [f.encode_name for f in msgspec.structs.fields(struct)]


def _tags(union: object) -> list[str]:
    return [str(t.__struct_config__.tag) for t in typing.get_args(union)]


def _nested(where: str, *structs: type[msgspec.Struct]) -> list[str]:
    # A nested struct's fields, as ``<where>.<field>``.
    return [f"{where}.{name}" for struct in structs for name in _wire_names(struct)]


def _nothing(dialect: ApiDialect) -> list[str]:
    # `$` keys are flatgate's own, not a client's fields.
    return [k for k in NOTHING[int(dialect)] if not k.startswith("$")]


PAGES: dict[str, list[str]] = {
    "openai-chat.md": [
        *_wire_names(chat_models.ChatCompletionRequest),
        *chat_models.EXTRA_FIELDS,
        *_nothing(ApiDialect.OPENAI_CHAT),
        *_tags(chat_models.Message),
        *_tags(chat_models.ContentPart),
        *_nested("messages", *typing.get_args(chat_models.Message)),
        *_nested("tool_calls", chat_models.ToolCall),
        *_nested("stream_options", chat_models.StreamOptions),
    ],
    "openai-responses.md": [
        *_wire_names(responses_models.ResponsesRequest),
        *_nothing(ApiDialect.OPENAI_RESPONSES),
        *FLATGATE_OWN,
        *HOSTED_TOOLS,
        *_tags(responses_items.Part),
        *_nested("input", responses_items.Item),
        *_nested("output_text", responses_items.OutputText),
        *_nested("stream_options", responses_models._StreamOptions),
    ],
    "anthropic-messages.md": [
        *_wire_names(messages_models.MessagesRequest),
        *messages_models.EXTRA_FIELDS,
        *_nothing(ApiDialect.ANTHROPIC_MESSAGES),
    ],
    "gemini.md": [
        *_wire_names(gemini_models.GenerateContentRequest),
        *_nested("contents", gemini_content.Content),
        *_nested("parts", gemini_content.Part),
        *_nested("tools", gemini_models.Tool),
        *_nested("functionDeclarations", gemini_models.FunctionDeclaration),
        *_nested("toolConfig", gemini_models.ToolConfig),
        *_nested("functionCallingConfig", gemini_models.FunctionCallingConfig),
        *_nested("generationConfig", gemini_models.GenerationConfig),
        *_nested("thinkingConfig", gemini_models.ThinkingConfig),
        *_nested("safetySettings", gemini_models.SafetySetting),
        *_nothing(ApiDialect.GEMINI),
        "x-goog-api-key",
        "key",
    ],
}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_row_has_a_cell_per_backend_and_why(page: str) -> None:
    rows = request_table(page)
    assert len(rows) >= 20, f"{page}: a request table of {len(rows)} rows"
    for row in rows:
        assert len(row) == len(HEADER), f"{page}: {len(row)} cells in {row}"
        assert all(row), f"{page}: an empty cell in {row}"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_table_names_every_field_the_edge_reads(page: str) -> None:
    named = Named.of(request_table(page))
    missing = [name for name in dict.fromkeys(PAGES[page]) if not named.names(name)]
    assert not missing, f"{page}: the request table has no row for {missing}"
    assert all(named.names_header(h) for h in HEADERS), f"{page}: a header without a row"
    assert any(first.startswith(UNKNOWN_ROW) for first in named.firsts), (
        f"{page}: no row for the fields the edge does not know"
    )


@pytest.mark.parametrize("page", NESTED_PAGES)
def test_the_table_says_what_becomes_of_unknown_nested_keys(page: str) -> None:
    rows = [row for row in request_table(page) if row[0].startswith(NESTED_ROW)]
    assert len(rows) == 1, f"{page}: one row for the nested keys no struct knows"
    assert "refused" in rows[0][1:-1], f"{page}: {rows[0]}"


def test_a_missing_row_is_found() -> None:
    """The check itself: each row that is a model field's only row, removed,
    is missed."""
    rows = request_table("openai-chat.md")
    for i, row in enumerate(rows):
        if row[0].startswith("`seed`"):
            named = Named.of(rows[:i] + rows[i + 1 :])
            assert not named.names("seed")
            assert named.names("n")
            assert not Named.of(rows).names("no_such_field")
            return
    pytest.fail("no seed row")  # pragma: no cover
