"""The config document: one tree of frozen Structs, the only description of
the file.

Each key is declared once here, with its default and its comment:
``servers`` (``[proxy]``, ``[edge]``, ``[stub]`` over the fields they share),
``routing`` (``[[backends]]``' common keys, ``[[routes]]``), ``callers``
(``[[models]]``, ``[[keys]]``, ``[auth]``), ``limits`` (``[state]``,
``[[limits]]``, ``[[tenants]]``), ``telemetry`` and ``root`` (the file,
``GatewayDocument``, and the services' slices of it). A backend protocol's
own keys live in its folder (``backends.openai.config``), as a subclass of
``routing.BackendConfig``, so that the edge, which imports this package,
never imports the backends.

Below both services and above only the wire layer: declarations, no checks
(each service checks its sections), no I/O.
"""
