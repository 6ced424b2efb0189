"""OpenAI Chat Completions: the request (``request``)."""
