"""Upstream HTTP: the ``Transport`` interface and its errors (``base``), the fast
keep-alive pool (``pool``), the httpx reference (``reference``). Knows nothing
of routing."""
