"""The ``gemini`` protocol's ``[[backends]]`` entry: the common keys, ``url``
default-able.

- ``url``: the Gemini API's base with its version, to which the adapter
  appends ``/models/{model}:{method}``; absent,
  ``https://generativelanguage.googleapis.com/v1beta`` (``DEFAULT_URL``, the
  version google-genai speaks).
- the credential: ``api_key`` / ``api_key_env``, sent as ``x-goog-api-key``
  (required, unless the caller's ``Authorization`` is forwarded:
  ``forward_credentials``, an OAuth 2.0 token the Gemini API also takes).

No I/O.
"""

from __future__ import annotations

from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.plumbing.config import Problems

__all__ = ["DEFAULT_URL", "GeminiConfig", "gemini_problems"]

DEFAULT_URL = "https://generativelanguage.googleapis.com/v1beta"


class GeminiConfig(BackendConfig, frozen=True, forbid_unknown_fields=True):
    """A ``gemini`` backend: the Gemini API (or a server of it)."""

    protocol: str = "gemini"
    url: str = DEFAULT_URL


def gemini_problems(b: GeminiConfig, where: str, problems: Problems) -> None:
    if not (b.api_key or b.api_key_env or b.forward_credentials):
        problems.append(
            f"{where}.api_key: required: the Gemini API's key (api_key or api_key_env), "
            "sent as x-goog-api-key"
        )
