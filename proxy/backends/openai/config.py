"""The ``openai`` protocol's ``[[backends]]`` entry: the common keys and
``max_tokens_field``.

No I/O.
"""

from __future__ import annotations

from typing import Literal

from flatgate.proxy.backends.section import BackendConfig

__all__ = ["OpenAIConfig"]


class OpenAIConfig(BackendConfig, frozen=True, forbid_unknown_fields=True):
    """An ``openai`` backend: a Chat Completions server."""

    protocol: str = "openai"

    # "max_completion_tokens" for OpenAI's o-series and gpt-5.
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
