"""The ``gemini`` protocol: Google's Gemini API (``generativelanguage.googleapis.com``).

The request written and the answer read with the one model of Gemini's API
(``apis.gemini``): ``encode``, ``parts``, ``stream``, ``whole``; Google's
error answers as refusals (``refusal``, shared with the ``vertex``
protocol, which serves Google's models with the same mapping)."""
