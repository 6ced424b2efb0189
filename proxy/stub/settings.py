"""The stub's settings: the ``[stub]`` section (declared in ``document.servers``).

Owns ``[stub]``'s checks, naming the key, its ``FLATGATE_STUB_*`` overlay,
and the closed sets it takes: the faults it injects (``backends.dialect.FAULTS``), its
tool modes (``backends.dialect.TOOL_MODES``) and the protocols it speaks
(``backends.registry.PROTOCOLS``: a protocol's folder holds the stub's
server of it). The stub reads nothing else of the file; the
gateway checks the whole document (``gateway.document``).

No I/O beyond reading the file it is given (``plumbing.config``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from flatgate.proxy.backends.registry import PROTOCOLS
from flatgate.proxy.document.servers import StubSection
from flatgate.proxy.plumbing.config import (
    ConfigError,
    Problems,
    convert_section,
    overlay_checked,
    read_document,
)
from flatgate.proxy.plumbing.server_section import server_problems

__all__ = [
    "STUB_OVERLAY",
    "StubSection",
    "load_stub_section",
    "parse_stub_section",
    "stub_problems",
]


# FLATGATE_STUB_<KEY> overlays, for plumbing.config.overlay_env.
STUB_OVERLAY: dict[str, tuple[str, ...]] = {"stub": StubSection.__struct_fields__}


def _check(s: StubSection, problems: Problems) -> None:
    server_problems("stub", s, problems)
    if s.up and 1 <= s.port <= 65535 and s.port + len(s.up) - 1 > 65535:
        problems.append(f"stub.port: {s.port} leaves no room for {len(s.up)} stubs (stub.up)")
    problems.at_least("stub.ttft_ms", s.ttft_ms, 0)
    problems.at_least("stub.itl_ms", s.itl_ms, 0)
    problems.at_least("stub.canned", s.canned, 0)
    problems.at_least("stub.cadence_tokens", s.cadence_tokens, 1)
    if s.cadence and s.canned:
        problems.append("stub.cadence: not with stub.canned (choose one)")
    if not s.up or len(set(s.up)) != len(s.up):
        problems.append("stub.up: one or more protocols, each once")
    for where, name in (("stub.protocol", s.protocol), *(("stub.up", p) for p in s.up)):
        if name not in PROTOCOLS:
            problems.append(f"{where}: expected one of {', '.join(PROTOCOLS)}, got {name!r}")
    problems.drain("stub", s.drain_grace_seconds, s.drain_seconds)


def _parse(
    data: Mapping[str, Any], environ: Mapping[str, str]
) -> tuple[StubSection | None, Problems]:
    problems = Problems()
    overlaid = overlay_checked(data, environ, STUB_OVERLAY, problems)
    if overlaid is None:
        return None, problems
    section = convert_section(overlaid, "stub", StubSection, problems, _check)
    return (None if problems else section), problems


def stub_problems(data: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """Every problem of ``[stub]`` in a parsed TOML document, with the
    ``FLATGATE_STUB_*`` variables of ``environ`` (``None``: ``os.environ``)
    laid over it; ``[]`` when it is good."""
    return _parse(data, os.environ if environ is None else environ)[1]


def parse_stub_section(
    data: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> StubSection:
    """``[stub]`` of a parsed TOML document, ``FLATGATE_STUB_*`` laid over it;
    raises ``ConfigError`` listing every problem."""
    section, problems = _parse(data, os.environ if environ is None else environ)
    if section is None:
        raise ConfigError(*problems)
    return section


def load_stub_section(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> StubSection:
    """``[stub]`` of a config file (``None``: ``$FLATGATE_CONFIG`` or the
    embedded default), with ``FLATGATE_STUB_*`` overrides."""
    env = os.environ if environ is None else environ
    return parse_stub_section(read_document(path, env), env)
