"""The OpenAI Responses API at the edge: its request models (``models``,
``tools``), their translation to a ``CompletionRequest`` (``translate``), its
rendering (``echo``, ``output``, ``render``), stored responses (``store``,
``items``), and ``endpoint``, what the app's shared flow calls
(``RESPONSES``, this API's ``client_api.ClientApi``)."""
