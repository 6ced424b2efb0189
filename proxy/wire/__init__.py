"""The wire layer: ``CompletionRequest`` and ``CompletionChunk`` bytes, read and
written without I/O or asyncio. The edge and the proxy share it; it imports
nothing of flatgate but ``flatgate.generated``."""
