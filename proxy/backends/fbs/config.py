"""The ``fbs`` protocol's ``[[backends]]`` entry: the common keys only, and
what an entry that forwards the caller's bytes untouched cannot ask for.

No I/O.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.plumbing.config import Problems

__all__ = ["FbsConfig", "fbs_problems"]


class FbsConfig(BackendConfig, frozen=True, forbid_unknown_fields=True):
    """An ``fbs`` backend: a server of ``CompletionRequest`` FlatBuffers."""


def fbs_problems(b: FbsConfig, where: str, problems: Problems) -> None:
    """The keys an fbs backend cannot honour: it is sent the caller's bytes."""
    path = urlsplit(b.url).path
    if path.rstrip("/"):
        problems.append(
            f"{where}.url: an fbs backend's url is its server root (the proxy appends "
            f"/v1/completions), got path {path!r}"
        )
    if b.drop_unsupported:
        problems.append(
            f"{where}.drop_unsupported: an fbs backend is sent every field (in the request's "
            "extras); applies to the backends that translate (not fbs) only"
        )
    if b.api_key or b.api_key_env or b.model:
        key = "model" if b.model else "api_key" if b.api_key else "api_key_env"
        problems.append(
            f"{where}.{key}: an fbs backend is sent the caller's bytes untouched; "
            "use a backend that translates (openai, anthropic, ...) to rename or authenticate"
        )
