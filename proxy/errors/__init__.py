"""flatgate's one error root and its registry of codes, below both services.

``root`` holds ``FlatgateError``, what both services raise and every client
API renders in its own shape; ``codes`` holds every code flatgate answers
with, its HTTP status and the OpenAI error type a JSON client sees.
"""
