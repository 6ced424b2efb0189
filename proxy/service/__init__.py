"""The proxy service: the ``/v1/completions`` and ``/v1/embeddings`` app
over ``CompletionRequest`` and ``EmbeddingRequest`` buffers, its route table
and balancer, and the one-process gateway's router (``inprocess``). Never
imports the edge."""
