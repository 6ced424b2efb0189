"""``python -m benchmarks.soak``: see ``benchmarks.soak.run``."""

from __future__ import annotations

import sys

from benchmarks.soak.run import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
