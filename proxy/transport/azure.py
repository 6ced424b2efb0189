"""Microsoft Entra ID tokens for Azure OpenAI, from azure-identity's chain:
the fetch a ``credentials.Refreshing`` runs off the request's path.

``entra_token(scope, credential, client_id)`` is a ``credentials.Fetch``:
each call asks the chosen credential for a token of ``scope``
(``https://cognitiveservices.azure.com/.default``, Azure OpenAI's) and
returns ``(token, expires_on)``. The credential is azure-identity's own
(``CREDENTIALS``):

- ``default``: ``DefaultAzureCredential``, the chain a platform team
  expects (the environment's service principal, workload identity, managed
  identity, the Azure CLI, ...; narrowed further by azure-identity's own
  ``AZURE_TOKEN_CREDENTIALS``);
- ``managed-identity``: ``ManagedIdentityCredential`` (App Service's
  ``IDENTITY_ENDPOINT``/``IDENTITY_HEADER``, the instance metadata service,
  Arc, Service Fabric, Cloud Shell);
- ``workload-identity``: ``WorkloadIdentityCredential`` (AKS: the federated
  token file and ``AZURE_TENANT_ID``/``AZURE_CLIENT_ID``);
- ``environment``: ``EnvironmentCredential`` (a service principal's secret
  or certificate in ``AZURE_*`` variables);
- ``cli``: ``AzureCliCredential`` (``az login``; a developer's machine).

``client_id`` picks a user-assigned managed identity (or the workload
identity's application). azure-identity is imported, and the credential
made, at the first fetch, in the refresher's thread: its import and its
look-ups are blocking, and a gateway with no Entra ID backend never pays
for them. azure-identity's own cache (MSAL's) hands back a token until five
minutes before its expiry, so the refresher's fetch ``margin`` seconds before
it gets a new one.

This module is the one place azure-identity enters; its errors are the
refresher's to log (``Refreshing`` catches whatever a chain raises).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Literal, get_args

from flatgate.proxy.transport.credentials import Fetch

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential

__all__ = ["CREDENTIALS", "ENTRA_SCOPE", "EntraCredential", "entra_token"]

# The scope of an Azure OpenAI (Cognitive Services) token.
ENTRA_SCOPE = "https://cognitiveservices.azure.com/.default"

EntraCredential = Literal["default", "managed-identity", "workload-identity", "environment", "cli"]
CREDENTIALS: tuple[EntraCredential, ...] = get_args(EntraCredential)


def _credential(kind: EntraCredential, client_id: str) -> TokenCredential:
    """azure-identity's credential of ``kind`` (imported here: see the module docstring)."""
    from azure import identity

    cid = client_id or None
    if kind == "managed-identity":
        return identity.ManagedIdentityCredential(client_id=cid)
    if kind == "workload-identity":
        return identity.WorkloadIdentityCredential(client_id=cid)
    if kind == "environment":
        return identity.EnvironmentCredential()
    if kind == "cli":
        return identity.AzureCliCredential()
    if cid is None:  # azure-identity's own default: AZURE_CLIENT_ID
        return identity.DefaultAzureCredential()
    return identity.DefaultAzureCredential(
        managed_identity_client_id=cid, workload_identity_client_id=cid
    )


def entra_token(
    scope: str = ENTRA_SCOPE, credential: EntraCredential = "default", client_id: str = ""
) -> Fetch[str]:
    """The fetch of an Entra ID token for ``scope`` (blocking: the refresher
    runs it in a thread)."""
    made: list[TokenCredential] = []
    lock = threading.Lock()

    def fetch() -> tuple[str, float | None]:
        with lock:  # one credential per backend, made once
            if not made:
                made.append(_credential(credential, client_id))
            source = made[0]
        token = source.get_token(scope)
        return token.token, float(token.expires_on)

    return fetch
