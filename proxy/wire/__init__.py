"""The wire layer: ``CompletionRequest`` and ``CompletionChunk`` bytes, read and
written without I/O or asyncio. The edge and the proxy share it; it imports
nothing of flatgate but ``flatgate.generated``.

One folder per root table: ``request/`` (``CompletionRequest``) and
``chunk/`` (``CompletionChunk``); an embeddings root gets a folder of its own
beside them. Shared by all of them: ``buffer`` (the bounds-checked
primitives), ``layout`` (every table's slots, kinds and inline layout: the
one place a field's position is said), ``schema`` (names, identifiers, media
types), ``codes`` (error codes) and ``builders`` (the builder pool)."""
