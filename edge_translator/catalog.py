"""The models the edge serves: a name or an alias to its ``ModelConfig``.

Shared by every client API. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from flatgate.edge_translator.errors import ModelNotFound, shown
from flatgate.edge_translator.settings import ModelConfig

__all__ = ["resolve_model"]


def resolve_model(models: Mapping[str, ModelConfig], name: str) -> ModelConfig:
    """The configured model for a name or alias; ``ModelNotFound`` (404) otherwise."""
    found = models.get(name)
    if found is None:
        raise ModelNotFound(
            f"The model '{shown(name)}' does not exist or you do not have access to it.",
            param="model",
        )
    return found
