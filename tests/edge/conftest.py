"""Fixtures the edge's tests share: a JWT signer per algorithm family, one
key each per test module."""

from __future__ import annotations

import pytest

from tests.edge.jwt_keys import Signer, ec_signer, ed_signer, rsa_signer

__all__ = ["ed", "es", "rs"]


@pytest.fixture(scope="module")
def rs() -> Signer:
    return rsa_signer()


@pytest.fixture(scope="module")
def es() -> Signer:
    return ec_signer()


@pytest.fixture(scope="module")
def ed() -> Signer:
    return ed_signer()
