"""ControllerMutationQuotaManagerTest (TEST-CASES §5): token bucket, strict and permissive quotas."""

from __future__ import annotations

import pytest

from quotaflow.engine import (
    ClientQuotaManager,
    MutationThrottledError,
    PermissiveControllerMutationQuota,
    QuotaType,
    StrictControllerMutationQuota,
    UnboundedControllerMutationQuota,
    is_strict,
)
from quotaflow.engine.sensors import token_throttle_ms

T = 1_000_000


def manager() -> ClientQuotaManager:
    return ClientQuotaManager(QuotaType.CONTROLLER_MUTATION, samples=10, window_seconds=1)


def test_throttle_time_from_tokens() -> None:
    assert [token_throttle_ms(v, 10) for v in (0, -5, -10)] == [0, 500, 1000]


def test_strict_quota() -> None:
    m = manager()
    m.update_quota("ANONYMOUS", "test-client", 10)
    quota = m.new_controller_mutation_quota("ANONYMOUS", "test-client", True, T)
    assert isinstance(quota, StrictControllerMutationQuota)
    quota.record(90, T)
    assert not quota.is_exceeded() and quota.throttle_time(T) == 0
    quota.record(90, T)
    assert not quota.is_exceeded() and quota.throttle_time(T) == 0
    assert m.metric_value("ANONYMOUS", "test-client", T) == -80
    with pytest.raises(MutationThrottledError) as exc:
        quota.record(90, T)
    assert exc.value.throttle_time_ms == 8000
    assert exc.value.errno == 89
    assert quota.is_exceeded() and quota.throttle_time(T) == 8000
    assert quota.throttle_time(T + 5000) == 3000
    assert m.metric_value("ANONYMOUS", "test-client", T) == -80  # the rejected mutation was not recorded


def test_permissive_quota() -> None:
    m = manager()
    m.update_quota("ANONYMOUS", "test-client", 10)
    quota = m.new_controller_mutation_quota("ANONYMOUS", "test-client", False, T)
    assert isinstance(quota, PermissiveControllerMutationQuota)
    throttles = []
    for _ in range(3):
        quota.record(90, T)
        throttles.append(quota.throttle_time(T))
        assert not quota.is_exceeded()
    assert throttles == [0, 8000, 17000]
    assert quota.throttle_time(T + 5000) == 12000


def test_manager_violation() -> None:
    m = manager()
    m.update_quota("ANONYMOUS", "test-client", 10)
    for i in range(10):
        assert m.record_and_get_throttle_ms("ANONYMOUS", "test-client", 10, T + 1000 * i) == 0
    now = T + 10_000
    assert m.record_and_get_throttle_ms("ANONYMOUS", "test-client", 110, now) == 0
    assert m.record_and_get_throttle_ms("ANONYMOUS", "test-client", 110, now) == 1000
    assert m.record_and_get_throttle_ms("ANONYMOUS", "test-client", 110, now + 1000) == 0
    names = {s.name for s in m.metric_samples(now + 1000)}
    assert {"tokens", "mutation-rate", "queue-size"} <= names


def test_unbounded_without_quota() -> None:
    m = manager()
    quota = m.new_controller_mutation_quota("ANONYMOUS", "test-client", True, T)
    assert isinstance(quota, UnboundedControllerMutationQuota)
    quota.record(10**9, T)
    assert quota.throttle_time(T) == 0 and not quota.is_exceeded()


def test_strict_versions() -> None:
    assert is_strict(19, 6) and not is_strict(19, 5)
    assert is_strict(37, 3) and not is_strict(37, 2)
    assert is_strict(20, 5) and not is_strict(20, 4)
    assert not is_strict(0, 9)


def test_wrong_manager_type() -> None:
    with pytest.raises(ValueError):
        ClientQuotaManager(QuotaType.PRODUCE).new_controller_mutation_quota("u", "c", True, T)
    with pytest.raises(ValueError):
        ClientQuotaManager(QuotaType.PRODUCE).record_exempt(1.0, T)
