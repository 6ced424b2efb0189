"""The soak test: mixed traffic through edge + proxy for a long while, with a backend restart.

``python -m benchmarks.soak`` (``make bench-load``: 200,000 requests into
``benchmarks/results/soak``) asks whether every request gets a defined
outcome and whether memory, descriptors and pools stay flat
(docs/performance.md, "Soak").

Modules: ``run`` (the servers, the restart, the result document, the command
line), ``traffic`` (the mix, the client, the outcome buckets), ``sampler``
(what each server holds, every few seconds) and ``report`` (the pass
condition, Markdown and the plot); the servers, the sampling thread, the
result files and the plot are ``benchmarks.harness``'.
"""

from __future__ import annotations

__all__: list[str] = []
