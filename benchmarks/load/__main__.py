"""``python -m benchmarks.load``: see ``benchmarks.load.run``."""

from __future__ import annotations

import sys

from benchmarks.load.run import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
