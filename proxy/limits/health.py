"""Whether the limits' store answers: one log line when it stops, one when it
comes back, never one per request; and the figures ``/metrics`` shows.

No I/O beyond the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["StoreHealth"]

log = logging.getLogger("flatgate.limits")


class StoreHealth:
    """``up`` (the last operation answered), ``errors`` (operations that did
    not, ever) and the policy the log line names."""

    __slots__ = ("errors", "name", "policy", "up")

    def __init__(self, name: str, policy: str) -> None:
        self.name = name
        self.policy = policy
        self.up = True
        self.errors = 0

    def failed(self, reason: str) -> None:
        self.errors += 1
        if self.up:
            self.up = False
            what = "allowing" if self.policy == "open" else "refusing"
            log.warning(
                "limits: store %s is unavailable (%s): %s requests until it answers "
                "(on_store_error = %s)",
                self.name,
                reason,
                what,
                self.policy,
            )

    def answered(self) -> None:
        if not self.up:
            self.up = True
            log.warning("limits: store %s answers again", self.name)

    def collect(self, prefix: str) -> Iterable[Metric]:
        """``<prefix>_limits_store_errors_total`` and ``<prefix>_limits_store_up``."""
        c = CounterMetricFamily(
            f"{prefix}_limits_store_errors", "Limits store operations that failed or timed out"
        )
        c.add_metric([], self.errors)
        g = GaugeMetricFamily(
            f"{prefix}_limits_store_up", "1 while the limits store answers, 0 while it does not"
        )
        g.add_metric([], 1.0 if self.up else 0.0)
        return [c, g]
