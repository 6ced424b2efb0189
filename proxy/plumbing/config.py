"""Config loading, shared by every service: one TOML file, environment overlays,
errors that name the key.

Owns the file's reading (a path, ``$FLATGATE_CONFIG``, or the embedded default
``proxy/default.toml``), the environment variable names
(``FLATGATE_CONFIG``, ``FLATGATE_<SECTION>_<KEY>``) and their TOML-syntax
values, and turning msgspec's validation errors into ``key: problem`` messages.
Each service owns the sections it reads (``service.settings``,
``backends.config``, ``edge_translator.config``).

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

__all__ = [
    "DEFAULT_CONFIG",
    "ENV_CONFIG",
    "ConfigError",
    "convert",
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
    """A config that cannot be used; the message names the key."""


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
