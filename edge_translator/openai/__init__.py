"""The OpenAI Chat Completions API at the edge: its request models, their
translation to a ``CompletionRequest``, and its rendering."""
