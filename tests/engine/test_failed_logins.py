"""The failed-login buckets' two ways to spend: take / give back (the console), tokens / charge (the gateway)."""

from __future__ import annotations

from quotaflow.engine.failed_logins import FailureBuckets


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_tokens_refill_and_a_charge_never_goes_below_none() -> None:
    clock = _Clock()
    buckets = FailureBuckets(1.0, clock)
    assert buckets.tokens("a") == 3.0  # burst 3 x rate
    for _ in range(5):  # failures joined to one hash: charged, but never into debt
        buckets.charge("a")
    assert buckets.tokens("a") == 0.0
    clock.now = 1.5
    assert buckets.tokens("a") == 1.5  # rate 1/s
    assert buckets.tokens("b") == 3.0  # another address is untouched


def test_take_and_give_back_still_count_only_failures() -> None:
    buckets = FailureBuckets(1.0, _Clock())
    assert buckets.take("a") and buckets.take("a") and buckets.take("a") and not buckets.take("a")
    buckets.give_back("a")
    assert buckets.take("a")
