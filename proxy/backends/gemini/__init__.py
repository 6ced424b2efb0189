"""The ``gemini`` protocol: Google's Gemini API (``generateContent``,
``streamGenerateContent?alt=sse``, ``embedContent``)."""
