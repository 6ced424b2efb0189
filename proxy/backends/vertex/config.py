"""The ``vertex`` protocol's ``[[backends]]`` entry: the common keys and
``project``, ``location``, ``api``, ``credentials_file``, ``scopes``,
``anthropic_version`` and ``default_max_tokens``; which publisher a model is
asked through (``api_for``) and where (``endpoint``).

- ``url``: Vertex AI's API base with its version; absent, the endpoint of
  ``location`` (``endpoint``): ``https://aiplatform.googleapis.com/v1`` for
  ``global``, ``https://aiplatform.{us,eu}.rep.googleapis.com/v1`` for the
  ``us`` and ``eu`` multi-regions, else
  ``https://{location}-aiplatform.googleapis.com/v1``. The adapter appends
  ``/projects/{project}/locations/{location}/publishers/{publisher}/models/{model}:{method}``.
- ``project``: the Google Cloud project (its id) the requests are billed to;
  required. ``location``: the region (``us-east5``, ``europe-west1``) or
  ``global`` (the default).
- ``api``: which publisher's API a completion goes through: ``anthropic``
  (Claude: ``:rawPredict`` / ``:streamRawPredict`` with the Messages body),
  ``gemini`` (Google's models: ``:generateContent`` /
  ``:streamGenerateContent?alt=sse``), or ``auto`` (the default):
  ``anthropic`` for a model id that begins ``claude-``
  (``claude-sonnet-4-5@20250929``), ``gemini`` for any other.
- the credential: an OAuth 2.0 access token from Google's Application
  Default Credentials (``transport.google``), presented as
  ``Authorization: Bearer``: ``credentials_file`` (a service account's key,
  an authorized user's or an external account's file) or, absent, google-auth's
  chain (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's file, the metadata
  server: GKE's workload identity, Compute Engine, Cloud Run), for
  ``scopes`` (``cloud-platform``). Vertex takes no API key here (``api_key``
  is refused), and never the caller's credential.
- ``anthropic_version``: the Messages body's ``anthropic_version`` on the
  Anthropic publisher (``vertex-2023-10-16``); ``default_max_tokens``: its
  ``max_tokens`` when a request gives none (Anthropic requires one).

No I/O.
"""

from __future__ import annotations

import re
from typing import Literal

from msgspec.structs import force_setattr

from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.plumbing.config import Problems
from flatgate.proxy.transport.google import CLOUD_PLATFORM

__all__ = [
    "ANTHROPIC",
    "ANTHROPIC_VERSION",
    "GEMINI",
    "VertexConfig",
    "api_for",
    "endpoint",
    "vertex_problems",
]

Api = Literal["auto", "gemini", "anthropic"]
GEMINI: Api = "gemini"
ANTHROPIC: Api = "anthropic"
# The Messages body's version on Vertex AI.
ANTHROPIC_VERSION = "vertex-2023-10-16"
# Multi-regions served by their own regional endpoint host.
_MULTI = {"us": "https://aiplatform.us.rep.googleapis.com/v1",
          "eu": "https://aiplatform.eu.rep.googleapis.com/v1"}  # fmt: skip
_LOCATION = re.compile(r"[a-z][a-z0-9-]*")
# A project id (6 to 30 lower-case letters, digits and hyphens) or a
# project number; a domain-scoped project's ``example.com:id`` too.
_PROJECT = re.compile(r"(?:[a-z0-9.-]+:)?[a-z0-9][a-z0-9-]*")


def endpoint(location: str) -> str:
    """Vertex AI's API base for ``location`` (see the module docstring)."""
    if location == "global":
        return "https://aiplatform.googleapis.com/v1"
    return _MULTI.get(location) or f"https://{location}-aiplatform.googleapis.com/v1"


class VertexConfig(BackendConfig, frozen=True, forbid_unknown_fields=True):
    """A ``vertex`` backend: Vertex AI in one project and location."""

    protocol: str = "vertex"
    # Absent: the endpoint of location (see the module docstring).
    url: str = ""

    # The Google Cloud project requests go to (required), and the location.
    project: str = ""
    location: str = "global"
    # "auto": claude-* through the Anthropic publisher, every other model Gemini.
    api: Api = "auto"
    # A credentials file for google-auth ("": Application Default Credentials).
    credentials_file: str = ""
    # The OAuth 2.0 scopes of the token.
    scopes: tuple[str, ...] = (CLOUD_PLATFORM,)
    # The Anthropic publisher's body: its anthropic_version, and its
    # max_tokens when a request gives none (Anthropic requires one).
    anthropic_version: str = ANTHROPIC_VERSION
    default_max_tokens: int = 4096

    def __post_init__(self) -> None:
        if not self.url and _LOCATION.fullmatch(self.location):
            force_setattr(self, "url", endpoint(self.location))


def api_for(api: Api, model: str) -> Api:
    """The publisher a request for ``model`` goes through (``api`` configured)."""
    if api != "auto":
        return api
    return ANTHROPIC if model.startswith("claude-") else GEMINI


def vertex_problems(b: VertexConfig, where: str, problems: Problems) -> None:
    problems.at_least(f"{where}.default_max_tokens", b.default_max_tokens, 1)
    if not b.project:
        problems.append(f"{where}.project: required: the Google Cloud project's id")
    elif not _PROJECT.fullmatch(b.project):
        problems.append(f"{where}.project: not a project id: {b.project!r}")
    if not _LOCATION.fullmatch(b.location):
        problems.append(
            f"{where}.location: a region (us-east5, europe-west1) or global, got {b.location!r}"
        )
    if b.api_key or b.api_key_env:
        problems.append(
            f"{where}.api_key: a vertex backend presents a token from Google's Application "
            "Default Credentials (credentials_file, or the environment's): give no api_key"
        )
    if b.forward_credentials:
        problems.append(
            f"{where}.forward_credentials: a vertex backend presents its own Google "
            "credentials, never the caller's"
        )
    if not b.scopes or not all(s.strip() for s in b.scopes):
        problems.append(f"{where}.scopes: at least one OAuth 2.0 scope, e.g. {CLOUD_PLATFORM!r}")
