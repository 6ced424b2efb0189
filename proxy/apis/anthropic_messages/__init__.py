"""Anthropic Messages: the request (``request``, its parts ``blocks``), the
extras its fields with no wire slot travel in (``extras``), and the answer
and its stream's events (``events``)."""
