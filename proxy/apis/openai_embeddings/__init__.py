"""OpenAI embeddings: the request (``request``)."""
