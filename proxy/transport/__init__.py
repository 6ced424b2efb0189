"""Upstream HTTP: the ``Transport`` interface and its errors (``base``), the fast
keep-alive pool (``fast``), the httpx reference (``reference``), chosen by
``factory``. Knows nothing of routing."""
