"""OpenAI embeddings, one model for the edge, the adapters and the stub: the
request (``request``) and the answer (``answer``)."""
