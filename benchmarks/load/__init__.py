"""``make bench-load``: end-to-end added latency and throughput of flatgate's hops.

The package: ``run`` (the harness and ``main``), ``procs`` (the servers it
starts and what it reads from ``/proc`` and ``/metrics``), ``clients`` (wrk
and the asyncio clients), ``results`` (samples and their summaries), ``rows``
(what is compared, and the request bodies), ``report``
(``load.{json,md,png}``) and ``launch`` (granian for the baselines).
``python -m benchmarks.load`` runs it.
"""

from __future__ import annotations

__all__: list[str] = []
