"""OpenAI's embeddings API at the edge, ``POST /v1/embeddings``: its request
(``models``), its ``EmbeddingRequest`` writer (``translate``), its answer
(``render``) and its steps through the shared flow (``flow``)."""
