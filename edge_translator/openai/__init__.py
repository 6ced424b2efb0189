"""The OpenAI Chat Completions API at the edge: its request (decoded
with ``proxy.apis.openai_chat``; ``mapping``), its translation to a ``CompletionRequest``
(``translate``), its rendering (``render``), and ``endpoint``, what the app's
shared flow calls (``CHAT``, this API's ``client_api.ClientApi``)."""
