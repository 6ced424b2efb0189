"""Config loading, shared by every service: one TOML file, environment overlays,
errors that name the key.

Owns the file's reading (a path, ``$FLATGATE_CONFIG``, or the embedded default
``proxy/default.toml``), the environment variable names
(``FLATGATE_CONFIG``, ``FLATGATE_<SECTION>_<KEY>``) and their TOML-syntax
values (``overlay_env``, the one overlay every service uses), turning
msgspec's validation errors into ``key: problem`` messages (``convert_at``,
through ``plumbing.validation``), and the checks every section shares
(``Problems``: ranges, ports, drain times, SHA-256 digests). The keys are
declared once, in ``proxy.document``; each service checks the sections it
reads (``service.settings``, ``stub.settings``, ``backends.registry``,
``limits.sections``, ``edge_translator.settings``) and the gateway the whole
document (``gateway.document``); each checks a whole document and reports
every problem it finds, not only the first.

No I/O beyond reading the file it is given.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from typing import Any, TypeVar

import msgspec
import msgspec.structs

from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.validation import read_validation

__all__ = [
    "DEFAULT_CONFIG",
    "ENV_CONFIG",
    "ConfigError",
    "Overlays",
    "Problems",
    "convert_at",
    "convert_entries",
    "convert_entry",
    "convert_section",
    "entries",
    "env_name",
    "env_value",
    "key_path",
    "overlay_checked",
    "overlay_env",
    "read_config_text",
    "read_document",
]

ENV_CONFIG = "FLATGATE_CONFIG"
DEFAULT_CONFIG = "default.toml"
T = TypeVar("T")
P = TypeVar("P", bound=list[str])
# The sections ``overlay_env`` lays variables over, each with its keys.
Overlays = Mapping[str, Iterable[str]]
# A SHA-256 written as a config value (of an API key, of a bearer token).
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class ConfigError(FlatgateError, ValueError):
    """A config that cannot be used: ``problems`` lists each one, naming its
    key; the message is them, one per line."""

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems: tuple[str, ...] = problems


class Problems(list[str]):
    """The problems found in a document, each ``key: what is wrong``; the
    checks every section shares append to it."""

    def at_least(self, key: str, value: float, low: float) -> None:
        if value < low:
            self.append(f"{key}: must be >= {low}, got {value}")

    def above(self, key: str, value: float, low: float = 0) -> None:
        if value <= low:
            self.append(f"{key}: must be > {low}, got {value}")

    def port(self, key: str, value: int) -> None:
        # 0 ("any free port") is refused: every granian worker would bind its
        # own, and nothing could find them.
        if not 1 <= value <= 65535:
            self.append(f"{key}: expected 1..65535, got {value}")

    def sha256(self, key: str, value: str, of: str) -> bool:
        """Whether ``value`` is a hex SHA-256 (of ``of``: "the key", "the token")."""
        if _HEX64.match(value):
            return True
        self.append(f"{key}: expected 64 lower-case hex digits (the SHA-256 of {of})")
        return False

    def drain(self, section: str, grace: float, seconds: float) -> None:
        """``drain_grace_seconds`` and ``drain_seconds`` of ``[section]``."""
        self.at_least(f"{section}.drain_grace_seconds", grace, 0)
        self.at_least(f"{section}.drain_seconds", seconds, 0)
        if grace >= seconds:
            self.append(
                f"{section}.drain_grace_seconds: must be less than {section}.drain_seconds "
                f"({seconds}), got {grace}"
            )


def env_name(section: str, key: str) -> str:
    """The environment variable that overrides ``[section] key``."""
    return f"FLATGATE_{section.upper()}_{key.upper()}"


def env_value(raw: str) -> Any:
    """An environment value in TOML syntax (``8080``, ``true``, ``"x"``), or the bare string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def overlay_env(
    data: Mapping[str, Any], environ: Mapping[str, str], sections: Overlays
) -> dict[str, Any]:
    """``data`` with ``FLATGATE_<SECTION>_<KEY>`` variables laid over each
    ``[section]`` table, for the keys given per section (a variable wins over
    the file; a table made of variables alone appears). Raises
    ``ConfigError`` (``section: expected a table``) for a section that is
    not a table."""
    out = dict(data)
    for section, keys in sections.items():
        table = out.get(section, {})
        if not isinstance(table, Mapping):
            raise ConfigError(f"{section}: expected a table")
        merged = dict(table)
        for key in keys:
            raw = environ.get(env_name(section, key))
            if raw is not None:
                merged[key] = env_value(raw)
        if merged:
            out[section] = merged
    return out


def overlay_checked(
    data: Mapping[str, Any], environ: Mapping[str, str], sections: Overlays, problems: list[str]
) -> dict[str, Any] | None:
    """``overlay_env``, its problem (a section that is not a table) added to
    ``problems`` instead of raised: ``None`` then."""
    try:
        return overlay_env(data, environ, sections)
    except ConfigError as exc:
        problems.extend(exc.problems)
        return None


def key_path(message: str, where: str = "") -> str:
    """msgspec's ``... - at `$.backends[0].url` `` as ``backends[0].url: ...``
    (a missing required key: ``routes[0].model: required key is missing``),
    the key named from ``where`` (the part converted: ``""``, the document's
    root)."""
    v = read_validation(message)
    if v.missing:
        return f"{v.where(root=where, field=v.missing)}: required key is missing"
    key = v.where(root=where)
    return f"{key}: {v.reason}" if key else v.reason


def convert_at(data: Any, kind: type[T], where: str, problems: list[str]) -> T | None:
    """``msgspec.convert`` of the part of a document at ``where`` (``""``: the
    whole), adding every problem it has to ``problems``, each naming its key
    from the document's root.

    msgspec stops at a part's first problem; for a table (a ``Struct``), each
    key is then tried on its own, so that all of its problems are listed, and
    what is returned is the table converted from its good keys alone (the
    defaults standing in for the bad ones), for checks of their values. ``None``
    when not even that converts."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        first = key_path(str(exc), where)
    if not (isinstance(data, Mapping) and issubclass(kind, msgspec.Struct)):
        problems.append(first)
        return None
    fields = {f.name: f for f in msgspec.structs.fields(kind)}
    forbid = kind.__struct_config__.forbid_unknown_fields
    required = {k: v for k, v in data.items() if k in fields and fields[k].required}
    found: list[str] = []
    good: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            if forbid:
                found.append(key_path(f"Object contains unknown field `{key}`", where))
            continue
        try:
            msgspec.convert({**required, key: value}, kind)
        except msgspec.ValidationError as exc:
            message = key_path(str(exc), where)
            if message not in found:
                found.append(message)
        else:
            good[key] = value
    problems.extend(found or [first])
    try:
        return msgspec.convert(good, kind)
    except msgspec.ValidationError:
        return None


def convert_section(
    data: Mapping[str, Any],
    name: str,
    kind: type[T],
    problems: P,
    check: Callable[[T, P], None],
) -> T | None:
    """The ``[name]`` table of a document (absent: its defaults) converted
    (``convert_at``) and, when it converts, checked by ``check``, which adds
    its problems to ``problems``."""
    section = convert_at(data.get(name, {}), kind, name, problems)
    if section is not None:
        check(section, problems)
    return section


def entries(data: Mapping[str, Any], key: str, problems: list[str]) -> list[Any]:
    """The ``[[key]]`` array of tables (``[]`` when it is not one: reported)."""
    found = data.get(key, [])
    if isinstance(found, list):
        return found
    problems.append(f"{key}: expected an array of tables ([[{key}]])")
    return []


def convert_entry(entry: Any, kind: type[T], where: str, problems: list[str]) -> T | None:
    """One ``[[...]]`` entry, or ``None`` if it has a problem (added): an
    entry with a problem of its own is not checked further (its other keys'
    checks could be about a default standing in for a bad value)."""
    before = len(problems)
    value = convert_at(entry, kind, where, problems)
    return value if len(problems) == before else None


def convert_entries(
    data: Mapping[str, Any], key: str, kind: type[T], problems: list[str]
) -> list[tuple[int, T]]:
    """The ``[[key]]`` entries that convert (``convert_entry``: the others'
    problems are added), each with its index in the array."""
    out = []
    for i, entry in enumerate(entries(data, key, problems)):
        value = convert_entry(entry, kind, f"{key}[{i}]", problems)
        if value is not None:
            out.append((i, value))
    return out


def read_config_text(path: str | os.PathLike[str] | None) -> str:
    """The config file's text; ``None`` means the embedded default."""
    if path is None:
        return resources.files("flatgate.proxy").joinpath(DEFAULT_CONFIG).read_text()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read config {os.fspath(path)!r}: {exc.strerror}") from exc


def read_document(
    path: str | os.PathLike[str] | None, environ: Mapping[str, str]
) -> dict[str, Any]:
    """The parsed TOML document: ``path``, else ``$FLATGATE_CONFIG``, else the
    embedded default."""
    if path is None:
        path = environ.get(ENV_CONFIG) or None
    text = read_config_text(path)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config is not valid TOML: {exc}") from exc
