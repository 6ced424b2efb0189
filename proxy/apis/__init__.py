"""The vendor APIs' wire formats, one package each, below the edge, the
backends and the stub, named as the access log names the client APIs:
``openai_chat`` (Chat Completions), ``openai_responses`` (Responses),
``anthropic_messages`` (Messages), ``openai_embeddings`` (embeddings). Each
holds its request's Structs, decoder and field tables; the edge decodes with
them, the backend adapters encode with them, and the stub serves with them.
``errors``, ``decoding`` and ``lenient`` (the stub's read past members of
no name) are what they share. Pure: no I/O."""
