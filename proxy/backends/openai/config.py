"""The ``openai`` protocol's ``[[backends]]`` entry: the common keys, Azure
OpenAI's (``backends.azure.AzureKeys``) and ``max_tokens_field``.

No I/O.
"""

from __future__ import annotations

from typing import Literal

from flatgate.proxy.backends.azure import AzureKeys, azure_problems
from flatgate.proxy.plumbing.config import Problems

__all__ = ["OpenAIConfig", "openai_problems"]


class OpenAIConfig(AzureKeys, frozen=True, forbid_unknown_fields=True):
    """An ``openai`` backend: a Chat Completions server."""

    protocol: str = "openai"

    # "max_completion_tokens" for OpenAI's o-series and gpt-5.
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"


def openai_problems(b: OpenAIConfig, where: str, problems: Problems) -> None:
    """The Azure keys' checks (``backends.azure``)."""
    azure_problems(b, where, problems, responses=False)
