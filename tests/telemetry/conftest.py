"""The telemetry tests' fixtures: ``otlp_receiver``, a real OTLP/HTTP receiver
per test (``tests.otlp``)."""

from __future__ import annotations

from tests.otlp import otlp_receiver

# Imported here, the fixture serves every module below.
__all__ = ["otlp_receiver"]
