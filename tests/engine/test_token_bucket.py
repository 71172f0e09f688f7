"""TokenBucketTest and SensorTest.testStrictQuotaEnforcementWithTokenBucket (TEST-CASES §1.5–§1.6)."""

from __future__ import annotations

from quotaflow.engine.token_bucket import TokenBucket

T = 1_000_000


def test_record() -> None:
    bucket = TokenBucket(10, 2000, 5.0)
    assert bucket.burst == 100
    assert bucket.measure(T) == 100
    bucket.record(60, T)
    assert bucket.measure(T) == 40
    bucket.record(5, T + 2000)
    assert bucket.measure(T + 2000) == 45
    bucket.record(60, T + 4000)
    assert bucket.measure(T + 4000) == -5


def test_unrecord_is_capped_at_burst() -> None:
    bucket = TokenBucket(10, 2000, 5.0)
    bucket.record(-60, T)
    assert bucket.measure(T) == 100
    bucket.record(60, T + 2000)
    assert bucket.measure(T + 2000) == 40
    bucket.record(-60, T + 4000)
    assert bucket.measure(T + 4000) == 100


def test_strict_enforcement() -> None:
    bucket = TokenBucket(10, 1000, 2.0)  # burst 20
    bucket.record(30, T)
    assert bucket.measure(T) == -10
    assert bucket.measure(T + 5000) == 0  # not negative: a strict record is allowed
    bucket.record(30, T + 5000)
    assert bucket.measure(T + 5000) == -30


def test_quota_change_keeps_tokens() -> None:
    bucket = TokenBucket(10, 1000, 10.0)
    bucket.record(50, T)
    bucket.quota = 2.0  # burst now 20: the refill caps at the new burst
    assert bucket.measure(T) == 20
