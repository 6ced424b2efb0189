"""``make bench-load``: end-to-end added latency and throughput of flatgate's hops.

The package: ``run`` (the harness and ``main``), ``clients`` (wrk and the
asyncio clients), ``results`` (samples and their summaries), ``rows`` (what is
compared, and the request bodies) and ``report`` (``load.{json,md,png}``);
the servers it starts, and what it reads from ``/proc`` and ``/metrics``, are
``benchmarks.servers``'. ``python -m benchmarks.load`` runs it.
"""

from __future__ import annotations

__all__: list[str] = []
