"""Google's Gemini API at the edge: ``models/{model}:generateContent``,
``:streamGenerateContent``, ``:countTokens``, ``:embedContent``,
``:batchEmbedContents`` and the model listing, under ``/v1beta`` and ``/v1``,
over the same ``CompletionRequest`` as the other client APIs.

Modules: the request, the answer and the error body are the one model of them,
``proxy.apis.gemini``; ``translate`` (request -> ``CompletionRequest``, through
the wire layer's ``wire.request.writer``), ``render`` (chunk frames -> a whole
``GenerateContentResponse``, an ``alt=sse`` stream or a JSON array stream),
``errors`` (flatgate's errors in Google's shape), ``endpoint`` (what the
shared flow calls: ``GeminiApi``, made per request for the path's model and
answer form, with the key from ``x-goog-api-key``, ``?key=`` or a bearer
token, and ``CountTokens``, answered at the edge), ``embed`` (the embeddings
flow's Gemini kind), ``models`` (the model endpoints in Gemini's shape) and
``routes`` (the app's table rows for all of it).
"""
