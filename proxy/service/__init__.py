"""The proxy service: the ``/v1/completions`` app, its route table, the
balancer, and the built-in stub backend. Never imports the edge."""
