"""The collector's tuning: thresholds and freeze, and their config keys."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from flatgate.edge_translator.settings import edge_problems
from flatgate.proxy.plumbing.gctune import DEFAULT_THRESHOLDS, tune
from flatgate.proxy.service.settings import ProxySection, config_problems


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    gc.unfreeze()  # an app built in this process earlier (create_app) froze it
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.mark.usefixtures("restore_gc")
def test_tune_sets_thresholds_and_freezes() -> None:
    tune((1234, 5, 6), freeze=False)
    assert gc.get_threshold() == (1234, 5, 6)
    assert gc.get_freeze_count() == 0
    tune(DEFAULT_THRESHOLDS)
    assert gc.get_threshold() == DEFAULT_THRESHOLDS
    assert gc.get_freeze_count() > 0  # what exists now is out of every collection's reach


def test_the_shipped_defaults_and_their_checks() -> None:
    assert ProxySection().gc_thresholds == DEFAULT_THRESHOLDS and ProxySection().gc_freeze
    data = {
        "proxy": {"gc_thresholds": [700, -1, 10]},
        "edge": {"gc_thresholds": [-5, 10, 10]},
        "backends": [{"name": "b", "url": "http://127.0.0.1:9"}],
        "routes": [{"model": "*", "backends": ["b"]}],
    }
    assert "proxy.gc_thresholds[1]: must be >= 0, got -1" in config_problems(data, {})
    assert "edge.gc_thresholds[0]: must be >= 0, got -5" in edge_problems(data, environ={})
