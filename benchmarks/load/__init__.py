"""``make bench-load``: end-to-end added latency and throughput of flatgate's hops.

The package: ``run`` (the workloads, their servers and ``main``), ``measure``
(the rounds and what they take), ``clients`` (wrk and the asyncio clients),
``results`` (samples and their summaries), ``rows`` (what is compared, and
the request bodies), ``openai_workload`` and ``peers`` (an OpenAI chat
request through flatgate and its peers) and ``report`` / ``report_openai``
(``load.{json,md,png}``, ``load-openai.{json,md,png}``); the servers it
starts, what it reads from ``/proc`` and ``/metrics``, the result files and
the plot's backend are ``benchmarks.harness``'. ``python -m benchmarks.load``
runs it.
"""

from __future__ import annotations

__all__: list[str] = []
