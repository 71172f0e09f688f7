from __future__ import annotations

import asyncio

import pytest

from quotaflow.gateway.auth.sasl import (
    LoginCache,
    PlainMessage,
    SaslAuthenticationError,
    SaslVerifier,
    hash_password,
    verify_password,
)
from quotaflow.store.base import Credential

FAST = 1000  # iterations: keeps the tests quick; the default is the slow production setting


def test_hash_is_salted_and_verifies() -> None:
    a = hash_password("alice", "s3cret", iterations=FAST)
    b = hash_password("alice", "s3cret", iterations=FAST)
    assert a.salt != b.salt and a.hash != b.hash
    assert a.user == "alice" and a.iterations == FAST
    assert verify_password(a, "s3cret") and verify_password(b, "s3cret")
    assert not verify_password(a, "s3cret ") and not verify_password(a, "")


def test_default_iterations_are_slow() -> None:
    assert hash_password("u", "p").iterations >= 100_000


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(b"\x00alice\x00pw", ("", "alice", "pw")), (b"alice\x00alice\x00pw", ("alice", "alice", "pw"))],
)
def test_plain_message_parses(raw: bytes, expected: tuple[str, str, str]) -> None:
    m = PlainMessage.parse(raw)
    assert (m.authzid, m.username, m.password) == expected


@pytest.mark.parametrize(
    "raw", [b"alice\x00pw", b"\x00\x00pw", b"\x00alice\x00", b"bob\x00alice\x00pw", b"\xff\x00a\x00b"]
)
def test_plain_message_rejects(raw: bytes) -> None:
    with pytest.raises(SaslAuthenticationError):
        PlainMessage.parse(raw)


class _Creds:
    def __init__(self, *creds: Credential) -> None:
        self.creds = {c.user: c for c in creds}

    def get_credential(self, user: str) -> Credential | None:
        return self.creds.get(user)


def _verifier(*creds: Credential, rate: int = 1) -> SaslVerifier:
    return SaslVerifier(_Creds(*creds), threads=1, failed_rate_per_ip=rate)  # type: ignore[arg-type]


def test_verifier_accepts_good_and_refuses_bad_logins() -> None:
    async def run() -> None:
        v = _verifier(hash_password("alice", "pw", iterations=FAST), rate=10)
        try:
            assert (await v.verify(b"\x00alice\x00pw", "10.0.0.1")).principal == "alice"
            for bad in (b"\x00alice\x00nope", b"\x00mallory\x00pw"):
                verdict = await v.verify(bad, "10.0.0.1")
                assert verdict.principal is None
                assert verdict.error == "Authentication failed: Invalid username or password"
            assert (await v.verify(b"alice", "10.0.0.1")).error == "Invalid SASL/PLAIN message: expected 3 tokens"
        finally:
            v.close()

    asyncio.run(run())


def test_verifier_caches_good_logins_and_throttles_failing_ips() -> None:
    async def run() -> None:
        v = _verifier(hash_password("alice", "pw", iterations=FAST), rate=1)
        try:
            assert (await v.verify(b"\x00alice\x00pw", "10.0.0.9")).principal == "alice"
            assert v.hashed == 1
            assert (await v.verify(b"\x00alice\x00pw", "10.0.0.9")).principal == "alice"
            assert v.hashed == 1  # the second login came from the cache
            for _ in range(6):  # burst of 3 hashes, then refused without hashing
                assert (await v.verify(b"\x00alice\x00wrong", "10.0.0.9")).principal is None
            assert v.hashed == 4 and v.refused == 3
            # the throttled IP's good client still gets in (cache), another IP still gets its hashes
            assert (await v.verify(b"\x00alice\x00pw", "10.0.0.9")).principal == "alice"
            assert (await v.verify(b"\x00alice\x00wrong", "10.0.0.10")).principal is None
            assert v.hashed == 5
            # /metrics: the same counts, the failed hashes apart from the good one
            assert {m.name: m.value for m in v.metric_samples(0)} == {
                "password-hash-total": 5.0, "password-hash-failed-total": 4.0, "password-check-refused-total": 3.0}
        finally:
            v.close()

    asyncio.run(run())


def test_the_login_cache_is_no_oracle_for_another_ip() -> None:
    """alice logged in from 10.0.0.9; a guesser on 10.0.0.66 spends its failed-login tokens, then sends alice's
    right password: refused without a check (her cached login is her address's, not a free answer for anyone)."""
    async def run() -> None:
        v = _verifier(hash_password("alice", "pw", iterations=FAST), rate=1)
        try:
            assert (await v.verify(b"\x00alice\x00pw", "10.0.0.9")).principal == "alice"
            for _ in range(5):
                assert (await v.verify(b"\x00alice\x00guess", "10.0.0.66")).principal is None
            hashed = v.hashed
            assert (await v.verify(b"\x00alice\x00pw", "10.0.0.66")).principal is None
            assert v.hashed == hashed
            assert (await v.verify(b"\x00alice\x00pw", "10.0.0.9")).principal == "alice"  # hers, from the cache
            assert v.hashed == hashed
        finally:
            v.close()

    asyncio.run(run())


def test_login_cache_follows_credential_changes() -> None:
    cache = LoginCache(size=2)
    old, new = hash_password("alice", "pw", iterations=FAST), hash_password("alice", "pw2", iterations=FAST)
    cache.remember(old, "pw")
    assert cache.hit(old, "pw") and not cache.hit(old, "pw2")
    assert not cache.hit(new, "pw")  # the password was changed: the cached login no longer counts
    for user in ("b", "c"):
        cache.remember(hash_password(user, "x", iterations=FAST), "x")
    assert not cache.hit(old, "pw")  # LRU-bounded
