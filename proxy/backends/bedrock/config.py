"""The ``bedrock`` protocol's ``[[backends]]`` entry: the common keys and
``region``, ``api``, ``aws_profile``, ``anthropic_version`` and
``default_max_tokens``; which API a model is asked through (``api_for``).

- ``url``: Bedrock Runtime's endpoint, ``https://bedrock-runtime.<region>.amazonaws.com``
  (or a VPC endpoint's, or the stub's); the adapter appends
  ``/model/{modelId}/{operation}``.
- ``region``: the region requests are signed for; ``""``: the one the url's
  host names (``bedrock-runtime[-fips].<region>.amazonaws.com``), required
  when it names none.
- ``api``: which of Bedrock's APIs a completion goes through: ``invoke``
  (InvokeModel with the Anthropic Messages body), ``converse`` (Converse),
  or ``auto`` (the default): ``invoke`` for Anthropic's models (a model id,
  inference profile id or ARN whose model is ``anthropic.*``), so that
  ``cache_control``, thinking signatures and betas reach Claude unchanged;
  ``converse`` for every other model, and for an ARN that does not name its
  model (an application inference profile's).
- ``aws_profile``: the shared config's profile the credential chain reads
  (``""``: botocore's default: ``AWS_PROFILE``, else ``default``).
- the credential: ``api_key`` / ``api_key_env`` (a Bedrock API key, sent as
  ``Authorization: Bearer``); else ``AWS_BEARER_TOKEN_BEDROCK`` when it is set
  when the backend is made (as AWS's SDKs read it); else SigV4 with
  credentials from botocore's chain (``transport.aws``).
- ``anthropic_version``: the Messages body's ``anthropic_version`` on
  InvokeModel; ``default_max_tokens``: its ``max_tokens`` when a request gives
  none (Anthropic requires one; Converse does not, and is sent none).

No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.plumbing.config import Problems

__all__ = [
    "BEARER_ENV",
    "CONVERSE",
    "INVOKE",
    "BedrockConfig",
    "api_for",
    "bearer_of",
    "bedrock_problems",
    "is_anthropic",
    "model_part",
    "region_of",
]

Api = Literal["auto", "converse", "invoke"]
CONVERSE: Api = "converse"
INVOKE: Api = "invoke"
# The Bedrock API key's environment variable, as AWS's SDKs read it.
BEARER_ENV = "AWS_BEARER_TOKEN_BEDROCK"

_HOST = re.compile(
    r"bedrock-runtime(?:-fips)?\.([a-z]{2}(?:-[a-z]+)+-\d+)\.amazonaws\.com(?:\.cn)?"
)
# A cross-region inference profile's geography prefix (us., eu., apac., us-gov.,
# global., jp., ...): two letters or one of the longer ones; no model provider's
# name is two letters.
_GEO = re.compile(r"(?:[a-z]{2}|apac|global|us-gov)\.")


class BedrockConfig(BackendConfig, frozen=True, forbid_unknown_fields=True):
    """A ``bedrock`` backend: Bedrock Runtime in one region."""

    protocol: str = "bedrock"

    # The region requests are signed for ("": the url's, when it names one).
    region: str = ""
    # "auto": Anthropic models through InvokeModel, every other through Converse.
    api: Api = "auto"
    # The shared config's profile for botocore's credential chain ("": its default).
    aws_profile: str = ""
    # InvokeModel's Messages body: its anthropic_version, and its max_tokens
    # when a request gives none (Anthropic requires one).
    anthropic_version: str = "bedrock-2023-05-31"
    default_max_tokens: int = 4096


def region_of(b: BedrockConfig) -> str:
    """The region requests are signed for: ``region``, else the url's ("")."""
    if b.region:
        return b.region
    m = _HOST.fullmatch(urlsplit(b.url).hostname or "")
    return m.group(1) if m else ""


def model_part(model: str) -> str:
    """The model an id names: an ARN's resource id (after its last ``/``),
    without a cross-region profile's geography prefix."""
    if model.startswith("arn:"):
        model = model.rpartition("/")[2]
    geo = _GEO.match(model)
    return model[geo.end() :] if geo else model


def is_anthropic(model: str) -> bool:
    """Whether a model id, inference profile id or ARN names one of
    Anthropic's models (``anthropic.claude-...``, ``us.anthropic...``,
    ``arn:...:inference-profile/global.anthropic...``)."""
    return model_part(model).startswith("anthropic.")


def api_for(api: Api, model: str) -> Api:
    """The API a request for ``model`` goes through (``api`` configured)."""
    if api != "auto":
        return api
    return INVOKE if is_anthropic(model) else CONVERSE


def bedrock_problems(b: BedrockConfig, where: str, problems: Problems) -> None:
    problems.at_least(f"{where}.default_max_tokens", b.default_max_tokens, 1)
    if not region_of(b):
        problems.append(
            f"{where}.region: required: the url's host names no region "
            "(bedrock-runtime.<region>.amazonaws.com)"
        )
    if b.forward_credentials:
        problems.append(
            f"{where}.forward_credentials: a bedrock backend presents its own AWS "
            "credentials or Bedrock API key, never the caller's"
        )
    if b.aws_profile and (b.api_key or b.api_key_env):
        problems.append(
            f"{where}.aws_profile: give a Bedrock API key (api_key, api_key_env) or an "
            "AWS profile, not both"
        )


def bearer_of(b: BedrockConfig, environ: Mapping[str, str]) -> str:
    """The Bedrock API key the backend presents ("": it signs with SigV4)."""
    key = b.credential(environ)
    if key or b.api_key_env or b.aws_profile:
        return key
    return environ.get(BEARER_ENV, "")
