"""OpenAI Responses, one model for the edge, the ``openai-responses``
adapter and the stub: the request (``request``), its items and parts
(``items``) and tools (``tools``), the answer (``answer``) and its stream's
events (``events``), compaction (``compact``); the stub's lenient read of a request is
``apis.lenient``'s."""
