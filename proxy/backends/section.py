"""The checks of the keys every ``[[backends]]`` entry has: where a backend
is, its limits, and the credential flatgate presents to it.

``document.routing.BackendConfig`` declares them and ``common_problems``
checks them (every problem names its key). A protocol's own keys are a subclass of it in the
protocol's folder (``backends.openai.config``: ``max_tokens_field``), and
``backends.registry`` converts an entry to its protocol's class and checks
the rest. URL conventions: an ``fbs`` backend's ``url`` is the server root
(the proxy appends ``/v1/completions``); an ``openai`` or ``anthropic``
backend's ``url`` is the API base including its version
(``https://api.openai.com/v1``, ``http://127.0.0.1:8000/v1``), to which the
adapter appends ``/chat/completions`` or ``/messages``; an
``openai-responses`` backend's is the same base as an ``openai`` one's, to
which it appends ``/responses`` (Azure OpenAI's: ``backends.azure``). A
``bedrock`` backend's is Bedrock Runtime's endpoint
(``https://bedrock-runtime.<region>.amazonaws.com``), to which it appends
``/model/<model id>/<operation>``. Embeddings go to ``/v1/embeddings`` on an
``fbs`` server's root, to ``/embeddings`` on the JSON API base (``openai``,
``openai-responses``), and to InvokeModel on Bedrock.

``serves`` says which kinds of request (``REQUEST_KINDS``) a backend is sent:
absent, its protocol's (``registry.kinds``: an ``anthropic`` backend
completions only, Anthropic's API having no embeddings; every other both).
A route may so name a model only one kind can use: a request of the other
kind skips that backend, and is refused with a 400 when no backend of its
route serves it (``service.dispatch``, ``service.embed``).

No I/O beyond reading ``ca_file`` to check it loads.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from urllib.parse import urlsplit

from flatgate.proxy.document.routing import (
    COMPLETIONS,
    EMBEDDINGS,
    REQUEST_KINDS,
    BackendConfig,
    RequestKind,
)
from flatgate.proxy.plumbing.config import Problems

__all__ = [
    "COMPLETIONS",
    "EMBEDDINGS",
    "FIRST_BYTE_TIMEOUT",
    "REQUEST_KINDS",
    "BackendConfig",
    "RequestKind",
    "common_problems",
]

# A reasoning model may think for minutes before its first token.
FIRST_BYTE_TIMEOUT = 600.0


_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}


def common_problems(
    b: BackendConfig, where: str, environ: Mapping[str, str], problems: Problems
) -> None:
    """Every reason this backend cannot work that its common keys show, each
    naming ``where.<key>`` (its protocol's own: ``registry.backend_problems``)."""
    url = urlsplit(b.url)
    if url.scheme not in ("http", "https") or not url.hostname:
        problems.append(f"{where}.url: expected http(s)://host[:port][/path], got {b.url!r}")
    problems.at_least(f"{where}.weight", b.weight, 1)
    problems.at_least(f"{where}.max_outstanding", b.max_outstanding, 0)
    problems.above(f"{where}.connect_timeout", b.connect_timeout)
    problems.above(f"{where}.read_timeout", b.read_timeout)
    problems.at_least(f"{where}.total_timeout", b.total_timeout, 0)
    problems.at_least(f"{where}.first_byte_timeout", b.first_byte_timeout, 0)
    if b.api_key and b.api_key_env:
        problems.append(f"{where}.api_key_env: give api_key or api_key_env, not both")
    if (b.api_key or b.api_key_env) and b.forward_credentials:
        problems.append(
            f"{where}.forward_credentials: the backend has its own api_key; say which "
            "credential goes upstream, once"
        )
    if b.api_key_env and not environ.get(b.api_key_env):
        problems.append(f"{where}.api_key_env: environment variable {b.api_key_env} is not set")
    for name, value in b.headers.items():
        if name.lower() in _HOP_BY_HOP or not name or "\n" in name + value or "\r" in name + value:
            problems.append(f"{where}.headers.{name}: not a header flatgate can send")
    if b.serves is not None:
        if not b.serves:
            problems.append(f"{where}.serves: at least one of {', '.join(REQUEST_KINDS)}")
        elif len(set(b.serves)) != len(b.serves):
            problems.append(f"{where}.serves: each kind once")
    if b.health_path and not b.health_path.startswith("/"):
        problems.append(f"{where}.health_path: must start with '/'")
    if b.ca_file:
        if url.scheme != "https":
            problems.append(f"{where}.ca_file: only for https backends")
        else:
            try:
                ssl.create_default_context(cafile=b.ca_file)
            except (OSError, ssl.SSLError) as exc:
                problems.append(f"{where}.ca_file: cannot load {b.ca_file!r}: {exc}")
