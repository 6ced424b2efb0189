"""flatgate's edge: the OpenAI HTTP API for JSON clients, over the FlatBuffers proxy."""
