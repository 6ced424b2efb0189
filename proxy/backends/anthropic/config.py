"""The ``anthropic`` protocol's ``[[backends]]`` entry: the common keys,
``default_max_tokens`` and ``anthropic_version``.

No I/O.
"""

from __future__ import annotations

from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.plumbing.config import Problems

__all__ = ["AnthropicConfig", "anthropic_problems"]


class AnthropicConfig(BackendConfig, frozen=True, forbid_unknown_fields=True):
    """An ``anthropic`` backend: a Messages API server."""

    protocol: str = "anthropic"

    # Sent when a request gives no max_tokens (Anthropic requires one).
    default_max_tokens: int = 4096
    anthropic_version: str = "2023-06-01"


def anthropic_problems(b: AnthropicConfig, where: str, problems: Problems) -> None:
    problems.at_least(f"{where}.default_max_tokens", b.default_max_tokens, 1)
