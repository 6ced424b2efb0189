"""flatgate's internal proxy: route a ``CompletionRequest`` FlatBuffer from its
bytes, forward them untouched, stream ``CompletionChunk`` frames back.

Also home of the code the edge shares with it (wire reader, frames, builder
pool, upstream transports), so the two services meet only through ``schema/``.
"""
