"""Who may write: HTTP Basic against the store's credentials, the admin list, read-only; verified logins cached."""

from __future__ import annotations

import base64

import pytest

from quotaflow.console import access as access_mod
from quotaflow.console.access import Access, parse_basic, principal_allowed
from quotaflow.core.errors import ClusterAuthorizationFailedError, SaslAuthenticationFailedError
from quotaflow.store.credentials import hash_password
from quotaflow.store.sqlite import SqliteStore

from .conftest import ADMIN, FAST_HASH, OPERATOR


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_parse_basic() -> None:
    assert parse_basic(None) is None and parse_basic("Bearer x") is None
    assert parse_basic(basic("a", "p:w")) == ("a", "p:w")  # the password may hold a colon
    for bad in ("Basic !!!", "Basic " + base64.b64encode(b"nocolon").decode(), basic("", "p")):
        with pytest.raises(SaslAuthenticationFailedError):
            parse_basic(bad)


def test_admin_list_matches_like_the_gateways() -> None:
    assert principal_allowed(None, "anyone")
    assert principal_allowed(frozenset({"User:alice"}), "alice") and principal_allowed(frozenset({"alice"}), "alice")
    assert not principal_allowed(frozenset({"User:alice"}), "bob")


def test_require_admin(store: SqliteStore) -> None:
    a = Access(store, admins=frozenset({"admin"}))
    assert a.require_admin(basic(*ADMIN)).name == "admin"
    with pytest.raises(SaslAuthenticationFailedError):
        a.require_admin(None)
    with pytest.raises(SaslAuthenticationFailedError):
        a.require_admin(basic(ADMIN[0], "nope"))
    with pytest.raises(ClusterAuthorizationFailedError):
        a.require_admin(basic(*OPERATOR))
    with pytest.raises(ClusterAuthorizationFailedError, match="read-only"):
        Access(store, read_only=True).require_admin(basic(*ADMIN))


def test_verified_logins_are_cached_until_the_credential_changes(store: SqliteStore,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = access_mod.check_password

    def counting(s: SqliteStore, user: str, password: str) -> bool:
        calls.append(user)
        return real(s, user, password)

    monkeypatch.setattr(access_mod, "check_password", counting)
    now = [0.0]
    a = Access(store, clock=lambda: now[0])
    for _ in range(3):
        assert a.principal(basic(*ADMIN)) is not None
    assert calls == ["admin"]
    store.put_credential(hash_password("admin", "new-password", iterations=FAST_HASH))
    with pytest.raises(SaslAuthenticationFailedError):  # the old password no longer works, cache or not
        a.principal(basic(*ADMIN))
    assert a.principal(basic("admin", "new-password")) is not None
    now[0] += access_mod.CACHE_SECONDS + 1
    assert a.principal(basic("admin", "new-password")) is not None
    assert calls == ["admin", "admin", "admin", "admin"]
