from __future__ import annotations

import asyncio
import time

import pytest

from quotaflow.gateway.auth.sasl import (
    INVALID_CREDENTIALS,
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
                "password-hash-total": 5.0, "password-hash-failed-total": 4.0, "password-check-refused-total": 3.0,
                "password-check-joined-total": 0.0, "password-check-queued-total": 0.0,
                "password-check-busy-total": 0.0}
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


# -- load (issue 37): a correct password is never refused because of load --------------------------------------


def test_a_burst_of_one_credential_waits_for_its_one_hash() -> None:
    """200 logins of alice at once, cold cache, one IP: all succeed on one PBKDF2 run (single flight); on the old
    verifier all but 4 were refused as wrong passwords (pool full, then the IP's bucket charged before hashing)."""
    async def run() -> None:
        v = _verifier(hash_password("alice", "pw", iterations=100_000), rate=1)
        try:
            verdicts = await asyncio.gather(*(v.verify(b"\x00alice\x00pw", "10.0.0.1") for _ in range(200)))
            assert [x.principal for x in verdicts] == ["alice"] * 200
            assert v.hashed == 1 and v.joined >= 1 and v.refused == 0  # the late ones may find the cached login
        finally:
            v.close()

    asyncio.run(run())


def test_a_burst_of_many_users_from_few_ips_queues_and_all_succeed() -> None:
    """60 distinct users from 3 IPs at once: each needs its own hash; they wait for the one thread (the IPs' burst
    of 3 only bounds how many of an IP's hashes run at once), none is refused, and no failed-login token is spent."""
    async def run() -> None:
        creds = [hash_password(f"u{i}", f"pw{i}", iterations=FAST) for i in range(60)]
        v = _verifier(*creds, rate=1)
        try:
            verdicts = await asyncio.gather(*(v.verify(f"\x00u{i}\x00pw{i}".encode(), f"10.0.0.{i % 3}")
                                              for i in range(60)))
            assert [x.principal for x in verdicts] == [f"u{i}" for i in range(60)]
            assert v.hashed == 60 and v.refused == 0 and v.busy == 0 and v.queued > 0
            assert all(v.failures.tokens(f"10.0.0.{n}") >= 3 for n in range(3))
        finally:
            v.close()

    asyncio.run(run())


def test_a_concurrent_wrong_password_flood_stays_bounded() -> None:
    """300 different wrong passwords at once from one IP (burst 3, 1/s): at most the bucket's tokens are hashed
    (an IP never has more hashes in flight than tokens, and only failures spend them); the rest are refused
    without a hash, and none is answered busy (they are refused, not queued forever)."""
    async def run() -> None:
        v = _verifier(hash_password("alice", "pw", iterations=FAST), rate=1)
        try:
            started = time.monotonic()
            verdicts = await asyncio.gather(*(v.verify(f"\x00alice\x00guess{i}".encode(), "10.0.0.66")
                                              for i in range(300)))
            elapsed = time.monotonic() - started
            assert all(x.principal is None and x.error == INVALID_CREDENTIALS for x in verdicts)
            assert v.hashed == v.hashed_failed <= 3 + elapsed + 1
            assert v.refused == 300 - v.hashed and v.busy == 0
            # another IP is untouched; the flooding one's right password is refused without a hash (no oracle)
            assert (await v.verify(b"\x00alice\x00pw", "10.0.0.9")).principal == "alice"
            hashed = v.hashed
            assert (await v.verify(b"\x00alice\x00pw", "10.0.0.66")).principal is None
            assert v.hashed == hashed
        finally:
            v.close()

    asyncio.run(run())


def test_a_full_queue_answers_busy_never_a_wrong_password() -> None:
    """One thread, a queue of 2: of 10 distinct correct logins at once, one hashes, two wait, the rest are busy
    (the connection is closed for a reconnect); none is told its password is wrong."""
    async def run() -> None:
        creds = [hash_password(f"u{i}", "pw", iterations=300_000) for i in range(10)]  # all arrive in the first
        v = SaslVerifier(_Creds(*creds), threads=1, failed_rate_per_ip=10, queue_size=2)  # type: ignore[arg-type]
        try:
            verdicts = await asyncio.gather(*(v.verify(f"\x00u{i}\x00pw".encode(), "10.0.0.1") for i in range(10)))
            accepted = sum(x.principal is not None for x in verdicts)
            assert accepted >= 3 and sum(x.busy for x in verdicts) == 10 - accepted == v.busy >= 1
            assert all(x.error is None for x in verdicts)
            assert v.failures.tokens("10.0.0.1") >= 30
        finally:
            v.close()

    asyncio.run(run())


def test_a_wait_past_the_queue_timeout_is_busy() -> None:
    """A login that waits longer than quotaflow.sasl.verify.queue.timeout.ms for a thread is busy, not wrong."""
    async def run() -> None:
        creds = [hash_password(f"u{i}", "pw", iterations=300_000) for i in range(4)]
        v = SaslVerifier(_Creds(*creds), threads=1, failed_rate_per_ip=10,  # type: ignore[arg-type]
                         queue_timeout_ms=1)
        try:
            verdicts = await asyncio.gather(*(v.verify(f"\x00u{i}\x00pw".encode(), "10.0.0.1") for i in range(4)))
            assert sum(x.principal is not None for x in verdicts) == 1  # the first to arrive had a free thread
            assert sum(x.busy and x.error is None for x in verdicts) == 3
        finally:
            v.close()

    asyncio.run(run())
