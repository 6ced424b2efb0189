"""The Anthropic Messages API at the edge: ``POST /v1/messages`` and
``POST /v1/messages/count_tokens``, over the same ``CompletionRequest`` as the
OpenAI API.

Modules: the request, the answer and the extras, as msgspec Structs, and
their checks are ``proxy.apis.anthropic_messages``
(``anthropic_messages.request``, ``anthropic_messages.blocks``,
``anthropic_messages.events``, ``anthropic_messages.extras``);
``translate`` (request -> ``CompletionRequest``, through the wire layer's
``wire.request.writer``), ``render`` (chunk frames -> Messages SSE events,
or the whole answer), ``errors`` (flatgate's error
codes in Anthropic's shape and statuses), ``endpoint`` (what the app's
shared flow calls: ``MESSAGES``, this API's ``client_api.ClientApi``, with
authentication by ``x-api-key`` or bearer token, and ``COUNT_TOKENS``,
answered at the edge).
"""
