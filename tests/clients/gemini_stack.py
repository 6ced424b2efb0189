"""The stack the Gemini API's real clients run against (Gemini CLI,
``test_gemini_cli.py``; the AI SDK's Google provider,
``test_aisdk_google.py``): the stub in each protocol of ``PROTOCOLS``, each
behind a backend of that protocol, and one ``flatgate gateway`` in front of
them, every one a ``flatgate`` subprocess on a loopback port.

Models: ``model(<protocol>)`` (``echo-<protocol>``) reaches the stub speaking
``<protocol>``; the ``gemini`` one answers as ``gemini-2.5-flash``.
``dropping(<protocol>)`` (one of ``DROPPING``) reaches it through a second
backend, one with ``drop_unsupported = true`` (a field it can neither carry
nor map is dropped and named in ``x-flatgate-dropped-fields``, not refused).
The gateway's one key is ``KEY`` unless another is given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.clients.conftest import dropping, model
from tests.servers import Server, spawn
from tests.stacks import QUIET, start_all, stop_all, write_stack

__all__ = ["DROPPING", "KEY", "PROTOCOLS", "dropping", "gemini_stack", "model"]

# The backend protocols a Gemini client is tested through.
PROTOCOLS = ("fbs", "openai", "anthropic", "openai-responses", "gemini")
# The protocols also reached through a backend that drops what it cannot take.
DROPPING = ("openai", "anthropic", "openai-responses")
KEY = "sk-flatgate-gemini-client"
_UPSTREAM_KEY = "sk-flatgate-upstream"
_PROVIDERS = {"openai": "OpenAI", "openai-responses": "OpenAI", "anthropic": "Anthropic"}


def _stub_key(protocol: str) -> list[str]:
    return [] if protocol == "fbs" else ["--api-key", _UPSTREAM_KEY]


def _backend(protocol: str, url: str) -> dict[str, Any]:
    if protocol == "fbs":
        return {"url": url}
    if protocol == "gemini":
        return {
            "url": f"{url}/v1beta",
            "protocol": "gemini",
            "model": "gemini-2.5-flash",
            "api_key": _UPSTREAM_KEY,
        }
    return {"url": f"{url}/v1", "protocol": protocol, "api_key": _UPSTREAM_KEY}


@contextlib.contextmanager
def gemini_stack(d: Path, key: str = KEY) -> Iterator[Server]:
    """The stubs and the gateway (one worker, ``key`` its caller's), their
    logs in ``d``, for the block: the gateway."""
    stubs = {p: spawn("stub", ["--protocol", p, *_stub_key(p)], d) for p in PROTOCOLS}
    config = write_stack(
        d / "gateway.toml",
        proxy={**QUIET, "cooldown_seconds": 0},
        backends={
            **{f"stub-{p}": _backend(p, s.url) for p, s in stubs.items()},
            **{
                f"stub-{p}-dropping": {**_backend(p, stubs[p].url), "drop_unsupported": True}
                for p in DROPPING
            },
        },
        routes={
            **{model(p): f"stub-{p}" for p in PROTOCOLS},
            **{dropping(p): f"stub-{p}-dropping" for p in DROPPING},
        },
        edge={"log_format": "json"},
        models={
            **{model(p): _PROVIDERS.get(p, "SelfHosted") for p in PROTOCOLS},
            **{dropping(p): _PROVIDERS[p] for p in DROPPING},
        },
        keys={key: "gemini-clients"},
    )
    gateway = spawn("gateway", ["--config", config, "--workers", "1"], d, env={"NO_PROXY": "*"})
    servers = [*stubs.values(), gateway]
    start_all(servers)
    try:
        yield gateway
    finally:
        stop_all(servers)
