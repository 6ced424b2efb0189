"""The wire's names, each defined once: enums against the generated code, the
identifiers against the schema, the error codes against the docs' error table
(``docs/api/errors.md``)."""

from __future__ import annotations

import enum
import re
from pathlib import Path

import pytest

from flatgate.generated.LLMGateway import CompletionRequest as fb_request
from flatgate.generated.LLMGateway import EmbeddingRequest as fb_embedding
from flatgate.generated.LLMGateway.FinishReason import FinishReason as GenFinish
from flatgate.generated.LLMGateway.ModelProvider import ModelProvider as GenProvider
from flatgate.generated.LLMGateway.Role import Role as GenRole
from flatgate.generated.LLMGateway.ToolChoiceMode import ToolChoiceMode as GenChoice
from flatgate.proxy.errors import codes
from flatgate.proxy.wire import schema

ROOT = Path(__file__).resolve().parents[2]


def _values(generated: type) -> dict[str, int]:
    return {k: v for k, v in vars(generated).items() if not k.startswith("_") or k == "None_"}


@pytest.mark.parametrize(
    ("mirror", "generated"),
    [
        (schema.Provider, GenProvider),
        (schema.Role, GenRole),
        (schema.ToolChoiceMode, GenChoice),
        (schema.FinishReason, GenFinish),
    ],
)
def test_every_schema_enum_value_has_its_name(mirror: type[enum.IntEnum], generated: type) -> None:
    assert sorted(int(m) for m in mirror) == sorted(_values(generated).values())


def test_request_identifier_is_the_schemas() -> None:
    text = (ROOT / "schema" / "gateway.fbs").read_text()
    declared = re.search(r'^file_identifier "(\w{4})";', text, re.M)
    assert declared is not None
    assert declared.group(1).encode() == schema.REQUEST_IDENTIFIER
    buf = b"\x08\0\0\0" + schema.REQUEST_IDENTIFIER
    assert fb_request.CompletionRequest.CompletionRequestBufferHasIdentifier(buf, 0)
    assert schema.CHUNK_IDENTIFIER != schema.REQUEST_IDENTIFIER


def test_embedding_identifiers_are_the_schemas() -> None:
    text = (ROOT / "schema" / "embeddings.fbs").read_text()
    declared = re.search(r'^file_identifier "(\w{4})";', text, re.M)
    assert declared is not None
    assert declared.group(1).encode() == schema.EMBEDDING_REQUEST_IDENTIFIER
    buf = b"\x08\0\0\0" + schema.EMBEDDING_REQUEST_IDENTIFIER
    assert fb_embedding.EmbeddingRequest.EmbeddingRequestBufferHasIdentifier(buf, 0)
    # Every root's identifier is its own.
    identifiers = {
        schema.REQUEST_IDENTIFIER,
        schema.CHUNK_IDENTIFIER,
        schema.EMBEDDING_REQUEST_IDENTIFIER,
        schema.EMBEDDING_RESPONSE_IDENTIFIER,
    }
    assert len(identifiers) == 4 and all(len(i) == 4 for i in identifiers)


ERRORS_PAGE = ROOT / "docs" / "api" / "errors.md"
_ROW = r"^\| (\d{3}) \| `([a-z_]+)` \| ([a-z_]+) \|"


def _documented_codes() -> dict[str, tuple[int, str]]:
    """``| status | `code` | type | when |`` rows of the error table."""
    text = ERRORS_PAGE.read_text()
    rows = re.findall(_ROW, text, re.M)
    assert rows, f"{ERRORS_PAGE} has no error-code table"
    documented = {code: (int(status), kind) for status, code, kind in rows}
    assert len(documented) == len(rows), "a code is listed twice"
    return documented


def test_the_error_table_lists_every_code_with_its_status_and_type() -> None:
    assert _documented_codes() == {c.code: (c.status, c.type) for c in codes.CODES}


def test_the_error_table_is_kept_in_one_place() -> None:
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    copies = [p for p in pages if p != ERRORS_PAGE and re.search(_ROW, p.read_text(), re.M)]
    assert copies == []


def test_codes_are_unique_and_typed() -> None:
    assert len({c.code for c in codes.CODES}) == len(codes.CODES)
    assert {c.type for c in codes.CODES} <= {
        "invalid_request_error",
        "api_error",
        "rate_limit_error",
    }
    for c in codes.CODES:
        assert codes.by_code(c.code) is c
        assert c.meaning


def test_no_code_is_spelled_out_in_product_code() -> None:
    """Codes are used through the registry: a quoted code in a product module is
    a second definition."""
    quoted = re.compile("|".join(rf'"{re.escape(c.code)}"' for c in codes.CODES))
    offenders = []
    for folder in ("proxy", "edge_translator"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "codes.py":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if quoted.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []
