"""The OpenAI workload's cloud rows: the Bedrock (issue 39) and Gemini API
(issue 40) stubs, straight and behind nginx, and the gateway's backend of
each protocol in front of them (``benchmarks.load.cases``' ``bedrock-*-32``
and ``gemini-*-32`` cases).

| Row | What the client talks to |
|---|---|
| direct-bedrock (-stream) | the Bedrock stub, a Converse request (``/converse``, ``-stream``) |
| nginx-bedrock (-stream) | nginx, a plain ``proxy_pass`` to the Bedrock stub, the same |
| gateway-bedrock | the gateway, its ``bedrock`` backend (Converse, SigV4) to the Bedrock stub |
| direct-gemini (-stream) | the Gemini stub, a ``generateContent`` request |
| nginx-gemini (-stream) | nginx, a plain ``proxy_pass`` to the Gemini stub, the same |
| gateway-gemini | the gateway, its ``gemini`` backend (``x-goog-api-key``) to the Gemini stub |

The streamed rows ask the stub's ``/converse-stream`` and
``:streamGenerateContent?alt=sse`` (a row has one path); the gateway's rows
take the OpenAI chat request. ``CLOUD_BACKENDS`` writes each protocol's
``[[backends]]`` entry (keys of its own): ``bedrock`` through Converse, signed
with SigV4 with the static credentials of ``BEDROCK_ENV`` in the gateway's
environment (botocore's chain finds them first, the instance metadata lookup
disabled and no AWS config file read, so nothing leaves loopback; the stub,
given no key, checks no signature); ``gemini`` on the stub's ``/v1beta``
with ``GEMINI_KEY`` as ``x-goog-api-key`` (the stub, given none, checks
none) and the stub's model. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.harness.servers import HOST
from benchmarks.load.rows import Row

__all__ = [
    "BEDROCK_ENV",
    "BEDROCK_MODEL",
    "CLOUD_BACKENDS",
    "CLOUD_ROWS",
    "GEMINI_KEY",
    "GEMINI_MODEL",
]

_CHAT = "/v1/chat/completions"
# The Bedrock stub's model id (Converse through the ``bedrock`` backend: not
# an anthropic.* id), escaped as one path segment as botocore sends it.
BEDROCK_MODEL = "amazon.nova-pro-v1:0"
_BEDROCK_PATH = "/model/amazon.nova-pro-v1%3A0/"
# The gateway's AWS credentials: static, from the environment (botocore's
# chain reads them first), and no lookup beyond loopback.
BEDROCK_ENV = {
    "AWS_ACCESS_KEY_ID": "AKIDFLATGATEBENCH",
    "AWS_SECRET_ACCESS_KEY": "flatgate-bench-secret",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/nonexistent/flatgate-bench/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/flatgate-bench/aws-credentials",
    "AWS_BEARER_TOKEN_BEDROCK": "",
}

# The Gemini stub's model (the gateway's ``gemini`` backend renames the
# routed model to it), its paths and the backend's key.
GEMINI_MODEL = "gemini-2.5-flash"
_GEMINI_PATH = f"/v1beta/models/{GEMINI_MODEL}:"
GEMINI_KEY = "flatgate-bench-gemini-key"

CLOUD_ROWS: tuple[Row, ...] = (
    # Issue 39's rows (the cases bedrock-whole-32 and bedrock-stream-32).
    Row(
        "direct-bedrock",
        "stub-bedrock",
        _BEDROCK_PATH + "converse",
        "converse",
        (),
        None,
        "client to the Bedrock stub, Converse",
    ),
    Row(
        "direct-bedrock-stream",
        "stub-bedrock",
        _BEDROCK_PATH + "converse-stream",
        "converse",
        (),
        None,
        "client to the Bedrock stub, ConverseStream",
    ),
    Row(
        "nginx-bedrock",
        "nginx-bedrock",
        _BEDROCK_PATH + "converse",
        "converse",
        ("nginx-bedrock",),
        None,
        "proxy_pass, Converse",
    ),
    Row(
        "nginx-bedrock-stream",
        "nginx-bedrock",
        _BEDROCK_PATH + "converse-stream",
        "converse",
        ("nginx-bedrock",),
        None,
        "proxy_pass, ConverseStream",
    ),
    Row(
        "gateway-bedrock",
        "gateway",
        _CHAT,
        "openai",
        ("gateway",),
        None,
        "flatgate gateway, bedrock backend (Converse, SigV4)",
    ),
    # Issue 40's rows (the cases gemini-whole-32 and gemini-stream-32).
    Row(
        "direct-gemini",
        "stub-gemini",
        _GEMINI_PATH + "generateContent",
        "gemini",
        (),
        None,
        "client to the Gemini stub, generateContent",
    ),
    Row(
        "direct-gemini-stream",
        "stub-gemini",
        _GEMINI_PATH + "streamGenerateContent?alt=sse",
        "gemini",
        (),
        None,
        "client to the Gemini stub, streamGenerateContent",
    ),
    Row(
        "nginx-gemini",
        "nginx-gemini",
        _GEMINI_PATH + "generateContent",
        "gemini",
        ("nginx-gemini",),
        None,
        "proxy_pass, generateContent",
    ),
    Row(
        "nginx-gemini-stream",
        "nginx-gemini",
        _GEMINI_PATH + "streamGenerateContent?alt=sse",
        "gemini",
        ("nginx-gemini",),
        None,
        "proxy_pass, streamGenerateContent",
    ),
    Row(
        "gateway-gemini",
        "gateway",
        _CHAT,
        "openai",
        ("gateway",),
        None,
        "flatgate gateway, gemini backend (x-goog-api-key)",
    ),
)


def _bedrock_backend(name: str, port: int) -> str:
    """The ``bedrock`` backend on the stub: Converse for a Nova model id,
    SigV4 (no API key) in a region the stub's host cannot name."""
    return (
        f'\n[[backends]]\nname = "{name}"\nurl = "http://{HOST}:{port}"\nprotocol = "bedrock"\n'
        f'region = "us-east-1"\napi = "converse"\nmodel = "{BEDROCK_MODEL}"\n'
    )


def _gemini_backend(name: str, port: int) -> str:
    """The ``gemini`` backend on the stub: its ``/v1beta`` base, the stub's
    model, an API key sent as ``x-goog-api-key``."""
    return (
        f'\n[[backends]]\nname = "{name}"\nurl = "http://{HOST}:{port}/v1beta"\n'
        f'protocol = "gemini"\nmodel = "{GEMINI_MODEL}"\napi_key = "{GEMINI_KEY}"\n'
    )


# The cloud protocols' backend entries, keys of their own (name, port -> TOML).
CLOUD_BACKENDS: dict[str, Callable[[str, int], str]] = {
    "bedrock": _bedrock_backend,
    "gemini": _gemini_backend,
}
