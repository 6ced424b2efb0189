"""Anthropic Messages: the request (``request``)."""
