"""The ``openai-responses`` protocol's ``[[backends]]`` entry: the common keys,
Azure OpenAI's (``backends.azure.AzureKeys``), ``hosted_tools`` and ``compact``.

No I/O.
"""

from __future__ import annotations

from flatgate.proxy.backends.azure import AzureKeys, azure_problems
from flatgate.proxy.backends.extras import HOSTED_TOOLS
from flatgate.proxy.plumbing.config import Problems

__all__ = ["ResponsesConfig", "responses_problems"]


class ResponsesConfig(AzureKeys, frozen=True, forbid_unknown_fields=True):
    """An ``openai-responses`` backend: a Responses API server."""

    protocol: str = "openai-responses"

    # The tools only the provider runs (backends.extras HOSTED_TOOLS:
    # "web_search", "file_search", ...) that this backend runs too; a
    # client's hosted tool not listed is left out and reported.
    hosted_tools: tuple[str, ...] = ()
    # The server has POST /responses/compact (OpenAI does; vLLM and Ollama
    # do not): a client's compaction is forwarded there. Off: the model is
    # asked for a summary through /responses, as on every other backend.
    compact: bool = False


def responses_problems(b: ResponsesConfig, where: str, problems: Problems) -> None:
    """Each hosted tool named must be one flatgate knows; the Azure keys'
    checks (``backends.azure``); a compaction endpoint only on Azure's v1 API."""
    azure_problems(b, where, problems, responses=True)
    if b.compact and b.azure_api_version:
        problems.append(
            f"{where}.compact: Azure's deployment URLs have no /responses/compact "
            "(the v1 API's base as url, no azure_api_version)"
        )
    for i, tool in enumerate(b.hosted_tools):
        if tool not in HOSTED_TOOLS:
            problems.append(
                f"{where}.hosted_tools[{i}]: unknown hosted tool {tool!r}: expected one of "
                + ", ".join(HOSTED_TOOLS)
            )
