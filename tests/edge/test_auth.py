from __future__ import annotations

import hashlib

import pytest

from flatgate.edge_translator.errors import AuthenticationFailed
from flatgate.edge_translator.keys import KeyRing, bearer_token, hash_key
from flatgate.edge_translator.settings import KeyConfig


def ring() -> KeyRing:
    return KeyRing(
        [KeyConfig("acme", hash_key("sk-acme")), KeyConfig("globex", hash_key("sk-globex"))]
    )


def test_hash_key_is_hex_sha256():
    assert hash_key("sk-1") == hashlib.sha256(b"sk-1").hexdigest()


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token(header, token):
    assert bearer_token(header) == token


def test_keys_map_to_tenants():
    keys = ring()
    assert not keys.open
    assert keys.tenant_for("Bearer sk-acme") == "acme"
    assert keys.tenant_for("Bearer sk-globex") == "globex"


@pytest.mark.parametrize("header", [None, "", "Bearer sk-nope", "Basic sk-acme", "Bearer sk-acm"])
def test_missing_or_wrong_keys_are_401(header):
    with pytest.raises(AuthenticationFailed) as info:
        ring().tenant_for(header)
    assert info.value.status == 401


def test_no_keys_means_open_access():
    keys = KeyRing([])
    assert keys.open
    assert keys.tenant_for(None) == ""
    assert keys.tenant_for("Bearer anything") == ""
