"""flatgate benchmarks: `make bench` (micro) and `make bench-load` (end to end)."""
