"""flatgate's edge: the client APIs JSON clients speak (OpenAI Chat
Completions and Responses, Anthropic Messages, embeddings), each decoded
once into the wire's buffers for the router, and the router's chunk frames
rendered back in each API's own stream format. Never imports the proxy
service."""
