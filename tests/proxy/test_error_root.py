"""flatgate's one error root: every exception the product defines derives
from ``FlatgateError`` or from one of the wire layer's two, which sit below
the errors module (docs/design.md, "Errors"); each default code is
registered; the proxy's and the edge's errors are the same class."""

from __future__ import annotations

import ast
import builtins
import importlib
import json
import pkgutil
from pathlib import Path

import pytest

from flatgate.edge_translator.errors import ProxyFailed, chunk_error
from flatgate.proxy.apis.errors import InvalidRequest, openai_body, openai_detail
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.config import ConfigError
from flatgate.proxy.service.errors import ProxyError, answer_of
from flatgate.proxy.transport.base import UpstreamError, UpstreamTimeout
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.chunk.frames import ChunkError, MalformedFrame

ROOT = Path(__file__).resolve().parents[2]
BUILTIN = {
    name
    for name in dir(builtins)
    if isinstance(getattr(builtins, name), type)
    and issubclass(getattr(builtins, name), BaseException)
}
ROOTS = {"FlatgateError", "MalformedBuffer", "MalformedFrame"}


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def test_the_product_has_three_exception_roots() -> None:
    """A root: a class whose bases are built-in exceptions only."""
    roots = []
    for folder in ("proxy", "edge_translator"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and node.bases:
                    names = [_base_name(b) for b in node.bases]
                    if all(n in BUILTIN for n in names):
                        roots.append(node.name)
    assert sorted(roots) == sorted(ROOTS)


def _exceptions() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for package in ("flatgate.proxy", "flatgate.edge_translator"):
        pkg = importlib.import_module(package)
        for info in pkgutil.walk_packages(pkg.__path__, package + "."):
            module = importlib.import_module(info.name)
            for value in vars(module).values():
                if (
                    isinstance(value, type)
                    and issubclass(value, BaseException)
                    and value.__module__ == info.name
                ):
                    found.append(value)
    return found


def test_every_exception_derives_from_a_root_and_carries_a_registered_code() -> None:
    found = _exceptions()
    assert len(found) > 30
    for exc in found:
        assert issubclass(exc, (FlatgateError, MalformedBuffer, MalformedFrame)), exc
        if issubclass(exc, FlatgateError):
            assert exc.default in codes.CODES, exc


def test_the_proxys_and_the_edges_errors_are_one_class() -> None:
    err = ProxyError(codes.BACKENDS_BUSY, "busy", retry_after=2.0)
    assert isinstance(err, FlatgateError)
    assert (err.code, err.status, err.message, err.retry_after) == (
        codes.BACKENDS_BUSY,
        503,
        "busy",
        2.0,
    )
    assert json.loads(openai_body(err)) == {"error": openai_detail(err)}
    assert openai_detail(err)["code"] == "backends_busy"
    status, _, body = answer_of(err)
    assert (status, json.loads(body)) == (
        503,
        {"error": {"code": "backends_busy", "message": "busy"}},
    )
    assert answer_of(ProxyError(codes.BACKEND_REJECTED, "no", status=422, body=b"{}"))[::2] == (
        422,
        b"{}",
    )


@pytest.mark.parametrize(
    ("err", "code"),
    [
        (InvalidRequest("x"), codes.INVALID_REQUEST),
        (ProxyFailed("x"), codes.PROXY_UNAVAILABLE),
        (UpstreamError("x"), codes.BACKEND_UNAVAILABLE),
        (UpstreamTimeout("x"), codes.BACKEND_TIMEOUT),
        (ConfigError("a", "b"), codes.INTERNAL_ERROR),
        (chunk_error(ChunkError("backend_timeout", "slow")), codes.BACKEND_TIMEOUT),
        (chunk_error(None), codes.PROXY_PROTOCOL_ERROR),
    ],
)
def test_a_code_is_one_type(err: FlatgateError, code: codes.ErrorCode) -> None:
    assert err.code is code
    assert isinstance(err.code, codes.ErrorCode)


def test_a_former_value_error_still_is_one() -> None:
    assert isinstance(ConfigError("a"), ValueError)
    assert str(ConfigError("a", "b")) == "a\nb"
