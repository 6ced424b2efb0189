"""Workload A: many concurrent token streams through each hop (``make bench-load``).

``python -m benchmarks.streams`` keeps N client connections (2,000 by default)
streaming back to back from the stub in cadence mode (90 ms to the first
token, 14 ms between tokens, 128 tokens, a 400-token prompt) directly, through
nginx, through the flatgate proxy, through the edge and the proxy, and through
the one-process gateway when there is one, each row alone on the machine, and
reports errors, added latency, CPU per relayed token, GC per 1,000 streams
and RSS of every process, with a plot over time (docs/performance.md, "End to end"). ``--gc-table``
measures the proxy and gateway rows under several GC settings.

Modules: ``run`` (settings, rows in rounds, command line), ``rows`` (the
rows, their servers, bodies and config), ``client`` (the load and the checks),
``sampler`` (the readings of each row's processes), ``results`` (the
figures), ``report`` (Markdown and the plot), ``gctable`` and ``gcreport``
(the GC table and its Markdown); the servers, the sampling thread, the
result files and the plot are ``benchmarks.harness``'.
"""

from __future__ import annotations

__all__: list[str] = []
