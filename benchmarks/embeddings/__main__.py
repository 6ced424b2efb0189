"""``python -m benchmarks.embeddings``: ``benchmarks.embeddings.run.main``."""

from __future__ import annotations

import sys

from benchmarks.embeddings.run import main

sys.exit(main())
