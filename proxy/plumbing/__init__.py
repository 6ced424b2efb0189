"""What both services use: the granian server boundary (``serve``), config
loading (``config``) and Prometheus metrics (``metrics``). No business logic."""
