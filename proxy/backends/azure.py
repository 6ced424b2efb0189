"""Azure OpenAI as configuration of the ``openai`` and ``openai-responses``
backends: the keys both declare (``AzureKeys``), their checks, where a
request goes and the credential it carries (``AzureTarget``), Azure's
content-filter refusal (``content_filter_message``) and its paths as the
OpenAI API's own (``openai_path``, the stub's reading). The adapters' side
is ``openai.azure`` (``AzureConventions``, over both adapters, chosen by
each protocol's adapter factory when ``is_azure``).

The keys, declared once here, inherited by ``OpenAIConfig`` and
``ResponsesConfig``:

- ``auth``: the credential flatgate presents. ``"bearer"`` (the default,
  OpenAI's): ``api_key`` as ``Authorization: Bearer``; ``"api-key"``
  (Azure's key): ``api_key`` in the ``api-key`` header; ``"entra"``: a
  Microsoft Entra ID token as ``Authorization: Bearer``, fetched by
  azure-identity off the request's path and before it expires
  (``transport.azure``, ``transport.credentials.Refreshing``), no ``api_key``;
- ``azure_credential`` (``"default"``: ``DefaultAzureCredential``, or one
  narrower credential, ``transport.azure.CREDENTIALS``), ``azure_client_id``
  (a user-assigned managed identity) and ``azure_scope`` (the token's
  audience): Entra ID's, only with ``auth = "entra"``;
- ``azure_api_version``: absent, ``url`` is Azure's v1 API base,
  ``https://<resource>.openai.azure.com/openai/v1``, to which the adapters
  append ``/chat/completions``, ``/responses``, ``/embeddings`` and
  ``/models`` as for OpenAI (the model, the deployment's name, in the body).
  Given (``"2024-10-21"``), ``url`` is the resource's endpoint,
  ``https://<resource>.openai.azure.com``, and the older URLs are used, as
  the openai SDK's ``AzureOpenAI`` writes them:
  ``{url}/openai/deployments/{deployment}/chat/completions?api-version=...``
  (and ``/embeddings``), the Responses API's
  ``{url}/openai/responses?api-version=...`` (the deployment in the body's
  ``model``), readiness ``{url}/openai/models?api-version=...``;
- ``azure_deployment``: the deployment in those URLs (absent: the model sent
  upstream, ``model`` or the routed name, as ``AzureOpenAI`` does);
  ``openai`` only: the Responses API's URL names none.

Content filters: a choice that ends with ``finish_reason: content_filter``
and a response ``incomplete`` for ``content_filter`` are the
``CONTENT_FILTER`` finish already (``openai.stream``, ``responses.stream``);
each client API renders it its own way (Chat Completions
``content_filter``, Messages ``refusal``, Responses ``incomplete``). A
prompt Azure filters is its 400 with ``error.code: content_filter`` (or
``innererror.code: ResponsibleAIPolicyViolation``): a refusal passed to
the caller as a 400 whose message names the categories filtered
(``content_filter_message``; both ``innererror.content_filter_result``,
which Azure sends, and ``content_filter_results``, which its REST reference
names, and the Responses API's ``content_filters`` entries). Azure's other
annotations (``prompt_filter_results``, a choice's
``content_filter_results``, the asynchronous filter's annotation chunks) are
not carried: no client API has a field for them. No I/O.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import quote, urlsplit

import msgspec

from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.plumbing.config import Problems
from flatgate.proxy.transport.azure import ENTRA_SCOPE, EntraCredential, entra_token
from flatgate.proxy.transport.credentials import Refreshing

__all__ = [
    "AUTHS",
    "AzureKeys",
    "AzureTarget",
    "azure_problems",
    "content_filter_message",
    "is_azure",
    "openai_path",
]

Auth = Literal["bearer", "api-key", "entra"]
AUTHS: tuple[Auth, ...] = ("bearer", "api-key", "entra")
# The hosts of Azure OpenAI resources (their own, and AI Foundry's).
_AZURE_HOSTS = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")
# The paths AzureOpenAI sends below /openai/deployments/{deployment}.
_PER_DEPLOYMENT = frozenset({"/chat/completions", "/embeddings"})


class AzureKeys(BackendConfig, frozen=True, forbid_unknown_fields=True):
    """The keys of a backend that may be Azure OpenAI (see the module docstring)."""

    # The credential presented: "bearer" (api_key as Authorization: Bearer,
    # OpenAI's), "api-key" (api_key in Azure's api-key header) or "entra" (a
    # Microsoft Entra ID token from azure-identity, refreshed off the request's path).
    auth: Auth = "bearer"
    # auth = "entra": azure-identity's credential ("default":
    # DefaultAzureCredential; "managed-identity", "workload-identity",
    # "environment", "cli"), a user-assigned identity's client id, the scope.
    azure_credential: EntraCredential = "default"
    azure_client_id: str = ""
    azure_scope: str = ENTRA_SCOPE
    # Azure's older URLs with this api-version ("2024-10-21"): url is the
    # resource's endpoint. Absent: url is the v1 API's base (.../openai/v1).
    azure_api_version: str = ""
    # The deployment in those URLs ("": the model sent upstream).
    azure_deployment: str = ""


def is_azure(b: AzureKeys) -> bool:
    """Whether the backend is configured as Azure OpenAI (its own header,
    Entra ID, or Azure's older URLs)."""
    return b.auth != "bearer" or bool(b.azure_api_version)


def azure_problems(b: AzureKeys, where: str, problems: Problems, *, responses: bool) -> None:
    """Every reason the Azure keys cannot work, each naming ``where.<key>``
    (``responses``: an ``openai-responses`` backend)."""
    keyed = bool(b.api_key or b.api_key_env)
    if b.auth == "entra":
        if keyed:
            problems.append(
                f'{where}.auth: "entra" presents an Entra ID token: give no api_key or api_key_env'
            )
        if b.forward_credentials:
            problems.append(f'{where}.forward_credentials: not with auth = "entra"')
        if not b.azure_scope.strip():
            problems.append(f"{where}.azure_scope: the token's scope, e.g. {ENTRA_SCOPE!r}")
    else:
        if b.azure_credential != "default":
            problems.append(f'{where}.azure_credential: only with auth = "entra"')
        if b.azure_client_id:
            problems.append(f'{where}.azure_client_id: only with auth = "entra"')
        if b.azure_scope != ENTRA_SCOPE:
            problems.append(f'{where}.azure_scope: only with auth = "entra"')
    if b.auth == "api-key" and not keyed:
        problems.append(f'{where}.auth: "api-key" sends api_key or api_key_env: give one')
    path = urlsplit(b.url).path.rstrip("/")
    host = (urlsplit(b.url).hostname or "").lower()
    version = b.azure_api_version
    if version:
        if not version.strip() or any(c in version for c in "&#?/ "):
            problems.append(f"{where}.azure_api_version: not an api-version: {version!r}")
        if path.endswith(("/openai", "/openai/v1")):
            problems.append(
                f"{where}.url: with azure_api_version, url is the resource's endpoint "
                "(https://<resource>.openai.azure.com), to which /openai/... is appended"
            )
    elif host.endswith(_AZURE_HOSTS) and not path.endswith("/openai/v1"):
        problems.append(
            f"{where}.url: Azure's v1 API is at https://<resource>.openai.azure.com/openai/v1 "
            "(or set azure_api_version for the deployment URLs)"
        )
    if b.azure_deployment:
        if responses:
            problems.append(
                f"{where}.azure_deployment: the Responses API names the deployment in the "
                "body's model: set model"
            )
        elif not version:
            problems.append(f"{where}.azure_deployment: the deployment URLs need azure_api_version")
        elif "/" in b.azure_deployment:
            problems.append(f"{where}.azure_deployment: not a deployment name")


class AzureTarget:
    """Where one Azure backend's requests go, and the Entra ID token they
    carry (``credentials``; ``None`` for a key)."""

    __slots__ = ("_deployment", "_header", "_query", "_root", "_token", "credentials")

    def __init__(self, config: AzureKeys) -> None:
        self._root = config.url.rstrip("/")
        version = config.azure_api_version
        self._query = f"?api-version={quote(version, safe='')}" if version else ""
        self._deployment = config.azure_deployment
        self.credentials: Refreshing[str] | None = None
        self._token = ""
        self._header: list[tuple[str, str]] = []
        if config.auth == "entra":
            fetch = entra_token(config.azure_scope, config.azure_credential, config.azure_client_id)
            self.credentials = Refreshing(f"backend {config.name} (Entra ID)", fetch)

    def fixed(self, suffix: str) -> str | None:
        """The URL of ``suffix`` (``/chat/completions``, ``/responses``,
        ``/embeddings``, ``/models``) when it names no model's deployment."""
        if not self._query:
            return self._root + suffix
        if suffix in _PER_DEPLOYMENT:
            if not self._deployment:
                return None
            return self.url(suffix, self._deployment)
        return f"{self._root}/openai{suffix}{self._query}"

    def url(self, suffix: str, model: str) -> str:
        """The URL of ``suffix`` for a request to ``model``."""
        if self._query and suffix in _PER_DEPLOYMENT:
            deployment = quote(self._deployment or model, safe="")
            return f"{self._root}/openai/deployments/{deployment}{suffix}{self._query}"
        fixed = self.fixed(suffix)
        assert fixed is not None
        return fixed

    def token(self) -> list[tuple[str, str]]:
        """The Entra ID token's header (``CredentialsUnavailable`` when
        there is none yet); ``[]`` for a key. Made once per token, not per request."""
        creds = self.credentials
        if creds is None:
            return []
        value = creds.current()
        if value is not self._token:
            self._token = value
            self._header = [("authorization", "Bearer " + value)]
        return self._header


def openai_path(path: str) -> str:
    """The OpenAI API's own path for one of Azure's (the stub's reading:
    ``/openai/v1/chat/completions`` and
    ``/openai/deployments/{d}/chat/completions`` -> ``/v1/chat/completions``,
    ``/openai/responses`` -> ``/v1/responses``); any other path as it is."""
    if not path.startswith("/openai/"):
        return path
    rest = path[len("/openai") :]
    if rest.startswith("/v1/"):
        return rest
    if rest.startswith("/deployments/"):
        # "/deployments/{d}/chat/completions": "", "deployments", d, the rest
        _, _, deployment, suffix = [*rest.split("/", 3), ""][:4]
        return f"/v1/{suffix}" if deployment and suffix else path
    return "/v1" + rest


# -- content filters -------------------------------------------------------------


class _Error(msgspec.Struct):
    code: str | None = None
    message: str | None = None
    innererror: dict[str, msgspec.Raw] | None = None
    inner_error: dict[str, msgspec.Raw] | None = None
    # The Responses API's: one entry per source (prompt, completion).
    content_filters: list[dict[str, msgspec.Raw]] | None = None


class _Body(msgspec.Struct):
    error: _Error | None = None


class _Verdict(msgspec.Struct):
    filtered: bool = False
    detected: bool = False
    severity: str | None = None


_body = msgspec.json.Decoder(_Body).decode
_results = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_verdict = msgspec.json.Decoder(_Verdict).decode
_VIOLATION = "ResponsibleAIPolicyViolation"


def _filtered(raw: msgspec.Raw | None) -> list[str]:
    """The categories a ``content_filter_result(s)`` object says filtered:
    ``hate (high)``, ``jailbreak``; a custom blocklist's by its id."""
    if raw is None:
        return []
    try:
        results = _results(raw)
    except msgspec.DecodeError:
        return []
    out = []
    for name, value in results.items():
        try:
            verdict = _verdict(value)
        except msgspec.DecodeError:  # a list (custom_blocklists), an error object
            if name == "custom_blocklists" and bytes(value).startswith(b"["):
                out += [f"custom_blocklists ({e})" for e in _blocklists(value)]
            continue
        if verdict.filtered:
            out.append(f"{name} ({verdict.severity})" if verdict.severity else name)
    return out


class _Blocklist(msgspec.Struct):
    filtered: bool = False
    id: str = ""


_blocklists_decode = msgspec.json.Decoder(list[_Blocklist]).decode


def _blocklists(raw: msgspec.Raw) -> list[str]:
    try:
        return [b.id or "?" for b in _blocklists_decode(raw) if b.filtered]
    except msgspec.DecodeError:
        return []


def content_filter_message(body: bytes) -> str | None:
    """The refusal's message when ``body`` is Azure's content-filter error
    (``None`` when it is not one): Azure's message after the categories it
    filtered."""
    try:
        err = _body(body).error
    except msgspec.DecodeError:
        return None
    if err is None:
        return None
    inner = err.innererror or err.inner_error or {}
    inner_code = inner.get("code")
    violation = inner_code is not None and bytes(inner_code) == f'"{_VIOLATION}"'.encode()
    if err.code != "content_filter" and not violation:
        return None
    # Azure sends content_filter_result; its REST reference says ..._results.
    results = inner.get("content_filter_result") or inner.get("content_filter_results")
    categories = _filtered(results)
    for entry in err.content_filters or ():
        categories += _filtered(entry.get("content_filter_results"))
    named = ", ".join(dict.fromkeys(categories)) or "no category named"
    said = (err.message or "").strip()
    return f"Azure's content filter refused the prompt ({named})" + (f": {said}" if said else "")
