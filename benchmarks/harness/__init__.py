"""What the load, streams and soak benches (and the smaller ones) share.

``servers`` (start, wait for and stop the servers a bench or a test runs;
``tests/servers.py`` is its test API), ``sampling`` (what is read of them
while they run: ``/proc`` and ``/metrics``, on a sampling thread),
``results`` (a result document's head, where it goes, its files, the command
line's common flow), ``report`` (Markdown tables and their figures) and
``plot`` (every plot, with matplotlib). Each bench keeps only what is
specific to its question.
"""

from __future__ import annotations

__all__: list[str] = []
