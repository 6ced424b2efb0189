"""Config loading, shared by every service: one TOML file, environment overlays,
errors that name the key.

Owns the file's reading (a path, ``$FLATGATE_CONFIG``, or the embedded default
``proxy/default.toml``), the environment variable names
(``FLATGATE_CONFIG``, ``FLATGATE_<SECTION>_<KEY>``) and their TOML-syntax
values, turning msgspec's validation errors into ``key: problem`` messages, and
the checks every section shares (``Problems``: ranges, ports, drain times).
Each service owns the sections it reads (``service.settings``,
``backends.config``, ``edge_translator.config``); each checks a whole document
and reports every problem it finds, not only the first.

No I/O beyond reading the file it is given.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any, TypeVar

import msgspec
import msgspec.structs

__all__ = [
    "DEFAULT_CONFIG",
    "ENV_CONFIG",
    "ConfigError",
    "Problems",
    "convert",
    "convert_at",
    "env_name",
    "env_value",
    "key_path",
    "overlay_env",
    "read_config_text",
    "read_document",
]

ENV_CONFIG = "FLATGATE_CONFIG"
DEFAULT_CONFIG = "default.toml"
T = TypeVar("T")


class ConfigError(ValueError):
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
    data: Mapping[str, Any], environ: Mapping[str, str], sections: Mapping[str, Iterable[str]]
) -> dict[str, Any]:
    """``data`` with ``FLATGATE_<SECTION>_<KEY>`` variables laid over each
    ``[section]`` table, for the keys given per section."""
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


def key_path(message: str) -> str:
    """msgspec's ``... - at `$.backends[0].url` `` as ``backends[0].url: ...``
    (a missing required key: ``routes[0].model: required key is missing``)."""
    text, sep, path = message.rpartition(" - at `$")
    if not sep:
        return message
    path = path.rstrip("`").lstrip(".")
    missing = re.match(r"Object missing required field `([^`]+)`", text)
    if missing:
        key = f"{path}.{missing.group(1)}" if path else missing.group(1)
        return f"{key}: required key is missing"
    return f"{path}: {text}" if path else text


def convert(data: Any, kind: type[T]) -> T:
    """``msgspec.convert`` with its errors as ``ConfigError`` naming the key."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        raise ConfigError(key_path(str(exc))) from exc


def _at(message: str, where: str) -> str:
    """A msgspec message about the part at ``where`` as ``key: problem``, the
    key named from the document's root."""
    if where:
        text, sep, path = message.rpartition(" - at `$")
        message = f"{text} - at `${'.' + where}{path}" if sep else f"{message} - at `$.{where}`"
    return key_path(message)


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
        first = _at(str(exc), where)
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
                found.append(_at(f"Object contains unknown field `{key}`", where))
            continue
        try:
            msgspec.convert({**required, key: value}, kind)
        except msgspec.ValidationError as exc:
            message = _at(str(exc), where)
            if message not in found:
                found.append(message)
        else:
            good[key] = value
    problems.extend(found or [first])
    try:
        return msgspec.convert(good, kind)
    except msgspec.ValidationError:
        return None


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
