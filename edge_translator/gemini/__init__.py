"""Google's Gemini API at the edge: ``models/{model}:generateContent``,
``:streamGenerateContent``, ``:countTokens``, ``:embedContent``,
``:batchEmbedContents`` and the model listing, under ``/v1beta`` and ``/v1``,
over the same ``CompletionRequest`` as the other client APIs.

Modules: the request, the answer and the error body are the one model of them,
``proxy.apis.gemini``; ``translate`` (request -> ``CompletionRequest``, through
the wire layer's ``wire.request.writer``).
"""
