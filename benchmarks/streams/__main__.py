"""``python -m benchmarks.streams``: see ``benchmarks.streams.command``."""

from __future__ import annotations

import sys

from benchmarks.streams.command import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
