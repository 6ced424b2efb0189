"""The wire layer: ``CompletionRequest``, ``CompletionChunk``,
``EmbeddingRequest`` and ``EmbeddingResponse`` bytes, read and written
without I/O or asyncio. The edge and the proxy share it; it imports
nothing of flatgate but ``flatgate.generated``.

One folder per root: ``request/`` (``CompletionRequest``), ``chunk/``
(``CompletionChunk``) and ``embeddings/`` (``EmbeddingRequest`` and
``EmbeddingResponse``, from ``schema/embeddings.fbs``). Shared by all of
them: ``buffer`` (the bounds-checked primitives), ``layout`` (every table's
slots, kinds and inline layout: the one place a field's position is said),
``schema`` (names, identifiers, media types) and ``builders`` (the builder
pool). flatgate's error codes are not the wire's: they live above it, in
``flatgate.proxy.errors``."""
