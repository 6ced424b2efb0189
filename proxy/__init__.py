"""flatgate's proxy side, and what the proxy and the edge share, by layer
(each imports only the layers below it; ``[tool.importlinter]`` in
pyproject.toml says which, and ``make test`` enforces it)::

    gateway     the ``flatgate`` command (the composition root)
    service     the proxy service; ``stub``, the built-in model server, beside it
    backends    what a chosen backend is sent, a folder per protocol; ``limits`` beside it
    apis        the vendor APIs' request and answer models
    transport   upstream HTTP; ``plumbing``, what every server uses, beside it
    wire        the wire format, no I/O

The edge (``flatgate.edge_translator``) sits on the service's layer and
never imports it. docs/design.md, "The tree", says what each module holds.
"""
