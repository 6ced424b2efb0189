"""OpenAI Responses: the request (``request``) and its tools (``tools``)."""
