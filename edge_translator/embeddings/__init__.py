"""OpenAI's embeddings API at the edge, ``POST /v1/embeddings``: its request
(``proxy.apis.openai_embeddings``), its ``EmbeddingRequest`` writer (``translate``), its answer
(``render``) and its steps through the shared flow (``flow``)."""
