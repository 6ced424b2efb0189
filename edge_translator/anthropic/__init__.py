"""The Anthropic Messages API at the edge: ``POST /v1/messages`` and
``POST /v1/messages/count_tokens``, over the same ``CompletionRequest`` as the
OpenAI API.

Modules: ``models`` (the request, msgspec Structs, and its checks),
``translate`` (request -> ``CompletionRequest``, through the shared
``request_writer``), ``render`` (chunk frames -> Messages SSE events, or one
``message``), ``errors`` (flatgate's error codes in Anthropic's shape and
statuses), ``endpoint`` (what the app calls: authentication by ``x-api-key``
or bearer token, then the shared request flow).
"""
