"""What every server uses: the granian boundary (``serve``), config loading
(``config``), admission and body bounds (``admission``, ``intake``),
metrics, the access log, reloads, drains and traces. No business logic;
docs/design.md, "The tree", lists its modules."""
