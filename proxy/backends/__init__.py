"""What a chosen backend is sent and how its answer becomes chunk frames: a
folder per backend protocol (``fbs``, ``openai``, ``responses``,
``anthropic``), each registering itself in ``registry``, over what they
share (``base``, ``json_api``, ``extras``, ``dialect``: the stub's echo)."""
