"""Tuning CPython's cyclic garbage collector for a gateway worker.

CPython frees almost everything by reference counting; the generational
collector only looks for reference cycles. It runs a young collection every
``threshold0`` net allocations of container objects, which a worker streaming
thousands of tokens reaches every few streams: each one walks every young
object, on the request path. Raising ``threshold0`` (as Go's ``GOGC`` trades
memory for fewer collections) makes them rare; the objects a young collection
would have freed are freed by reference counting anyway, so memory grows only
by the cycles left waiting for the next collection.

``gc.freeze()`` after start-up moves everything made so far (modules, the
app, its tables) into a permanent generation no collection walks, so that a
full collection costs what the live requests hold, not the whole process.

Applied once per worker, by the app factories, from the config's
``gc_thresholds`` and ``gc_freeze``. No I/O.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence

__all__ = ["DEFAULT_THRESHOLDS", "tune"]

# gen0, gen1, gen2 (CPython's defaults are 700, 10, 10).
DEFAULT_THRESHOLDS = (50_000, 20, 100)


def tune(thresholds: Sequence[int] = DEFAULT_THRESHOLDS, *, freeze: bool = True) -> None:
    """Set the collector's thresholds and, with ``freeze``, move every object
    made so far out of its reach (call once the app is built)."""
    gc.set_threshold(*thresholds)
    if freeze:
        gc.collect()
        gc.freeze()
