"""OpenAI Chat Completions, one model for the edge, the ``openai`` adapter and
the stub: the request (``request``), its members of no name (``members``),
and the answer, whole and streamed (``answer``)."""
