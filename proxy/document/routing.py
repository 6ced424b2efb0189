"""What the router is given: ``[[backends]]`` (the keys every entry has) and
``[[routes]]``, each key said once with its default and its comment.

A protocol's own ``[[backends]]`` keys are a subclass of ``BackendConfig``
in the protocol's folder (``backends.openai.config``), so that a protocol
stays a folder; ``backends.registry`` converts each entry to its protocol's
class, and the document holds them as ``BackendConfig``. URL conventions
and the checks: ``backends.section``. No I/O.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, get_args
from urllib.parse import urlsplit

import msgspec

from flatgate.proxy.document.servers import DEFAULT_PROTOCOL

__all__ = [
    "COMPLETIONS",
    "EMBEDDINGS",
    "REQUEST_KINDS",
    "BackendConfig",
    "RequestKind",
    "RouteConfig",
]

# The kinds of request a backend may serve (``serves``).
RequestKind = Literal["completions", "embeddings"]

REQUEST_KINDS: tuple[RequestKind, ...] = get_args(RequestKind)

COMPLETIONS, EMBEDDINGS = REQUEST_KINDS


class BackendConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    url: str
    # One of backends.registry.PROTOCOLS; an entry is its protocol's subclass.
    protocol: str = DEFAULT_PROTOCOL
    weight: int = 1
    # Concurrent requests this backend takes (0: no limit).
    max_outstanding: int = 0
    connect_timeout: float = 2.0
    # Longest wait between bytes once the answer has begun.
    read_timeout: float = 30.0
    # Longest wait for the response head and the first chunk (0: read_timeout
    # for fbs, FIRST_BYTE_TIMEOUT for the JSON adapters).
    first_byte_timeout: float = 0.0
    # Longest whole exchange (0: none).
    total_timeout: float = 0.0
    # Forward the caller's Authorization header to this backend.
    forward_credentials: bool = False
    # The credential flatgate presents (openai: Authorization: Bearer, or
    # Azure's api-key header with auth = "api-key"; anthropic: x-api-key;
    # bedrock: a Bedrock API key, as a bearer token, instead of SigV4), given
    # inline or as an environment variable's name.
    api_key: str = ""
    api_key_env: str = ""
    # The model name sent upstream ("": the name the request was routed by).
    model: str = ""
    # Extra static headers sent with every request.
    headers: dict[str, str] = {}
    # A translated protocol's (not fbs): a client field this backend can
    # neither carry nor map is left out (named in x-flatgate-dropped-fields and
    # counted) instead of refused with a 400 naming it (backends.extras).
    drop_unsupported: bool = False
    # A translated protocol's: a request the client did not ask to
    # stream is asked for whole (stream: false) and its answer translated in
    # one step (json_api.WholeAnswer); false: every answer is streamed from
    # the backend, as the client's frames are.
    whole_answers: bool = True
    # Readiness probe: a path on the backend's server, from its root (vLLM and
    # llama.cpp serve /health there); "": fbs GET {url}/healthz, openai and
    # openai-responses GET {url}/models (Azure's models endpoint), anthropic
    # and bedrock a TLS or TCP connect.
    health_path: str = ""
    # A PEM file of CA certificates to trust besides the system store (https).
    ca_file: str = ""
    # The kinds of request it is sent, of REQUEST_KINDS (absent: its
    # protocol's, ``kinds``); a request of another kind skips it.
    serves: tuple[RequestKind, ...] | None = None

    def health_url(self) -> str:
        """The URL ``health_path`` names ("" when there is none)."""
        if not self.health_path:
            return ""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}{self.health_path}"

    def credential(self, environ: Mapping[str, str] | None = None) -> str:
        """The API key flatgate presents ("" for none)."""
        if self.api_key_env:
            return (os.environ if environ is None else environ).get(self.api_key_env, "")
        return self.api_key


class RouteConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    # Exact name, glob ("llama-*"), or "*" for the default route.
    model: str
    backends: list[str]
    provider: str | None = None
    fallbacks: list[str] = []
