"""The OpenAI Responses API at the edge: its request (decoded with
``proxy.apis.openai_responses``), its translation to a ``CompletionRequest`` (``translate``), its
rendering (``echo``, ``output``, ``render``), stored responses (``store``,
``items``), and ``endpoint``, what the app's shared flow calls
(``RESPONSES``, this API's ``client_api.ClientApi``), with ``compact``'s
``CompactApi`` for ``POST /v1/responses/compact``."""
