"""Upstream HTTP: the ``Transport`` interface and its errors (``base``), the fast
keep-alive pool (``fast``), the httpx reference (``reference``), chosen by
``factory``; and ``router``, what the edge asks of the router (``Router``),
which the router answers in process and a proxy over HTTP. Knows nothing of
routing."""
