"""flatgate's proxy side, by layer (each imports only the layers below it)::

    gateway     the ``flatgate`` command: starts stub, proxy and edge (composition root)
    service     the proxy service: app, routes, balancer, stub
    backends    what a chosen backend is sent: fbs passthrough, openai, anthropic
    transport   upstream HTTP: the interface and its errors, the fast pool, httpx
    plumbing    what both services use: the server boundary, config loading, metrics
    wire        the wire format, no I/O: route reader, verifier, frames, builder pool

The edge (``flatgate.edge_translator``) imports wire, transport and plumbing,
never the service; ``make test`` enforces the layers (``[tool.importlinter]``).
"""
