"""ClientRequestQuotaManagerTest plus exempt requests (KIP-124)."""

from __future__ import annotations

import pytest

from quotaflow.engine import ClientQuotaManager, QuotaType, is_request_quota_exempt, nanos_to_percent

T = 1_000_000
MS = 1_000_000  # ns per ms


def test_millis_to_percent() -> None:
    assert nanos_to_percent(67_100_000) == pytest.approx(6.71)
    assert nanos_to_percent(1_000_000_000) == 100.0


def test_request_percentage_quota_violation() -> None:
    m = ClientQuotaManager(QuotaType.REQUEST, quota_types_tracking="monotonic")
    m.update_quota("ANONYMOUS", "test-client", 1)
    for i in range(10):
        assert m.record_request_time_ns("ANONYMOUS", "test-client", 4 * MS, T + 1000 * i) == 0
    now = T + 10_500
    ms = m.record_request_time_ns("ANONYMOUS", "test-client", int(67.1 * MS), now)
    assert ms == 210
    m.throttle("ANONYMOUS", "test-client", ms, now)
    assert m.delay_queue_size(now) == 1
    assert m.delay_queue_size(now + 210) == 0
    t = now + 210
    throttles = []
    for _ in range(11):
        throttles.append(m.record_request_time_ns("ANONYMOUS", "test-client", 4 * MS, t))
        t += 1000
    assert throttles == [400] * 10 + [900]
    assert m.record_request_time_ns("ANONYMOUS", "test-client", 0, t) == 0
    assert m.record_request_time_ns("ANONYMOUS", "test-client", 500 * MS, t) == 1000  # capped at one window
    for _ in range(10):
        t += 1000
        assert m.record_request_time_ns("ANONYMOUS", "test-client", 0, t) == 1000
    assert m.record_request_time_ns("ANONYMOUS", "test-client", 0, t + 1000) == 0


def test_network_thread_time_is_recorded_without_check() -> None:
    m = ClientQuotaManager(QuotaType.REQUEST)
    m.update_quota(None, "c", 1)
    m.record_network_time_ns("u", "c", 500 * MS, T)  # far over quota, but never throttled itself
    assert m.metric_value("u", "c", T) == 5.0
    assert m.record_request_time_ns("u", "c", 0, T + 1) > 0  # later decisions see it


def test_exempt_request_time() -> None:
    m = ClientQuotaManager(QuotaType.REQUEST)
    m.record_exempt_ns(100 * MS, T)
    assert m.exempt is not None and m.exempt.measure(T) == 0  # quotas disabled: nothing recorded
    m.update_quota("u", None, 1)
    m.record_exempt_ns(300 * MS, T)
    assert m.exempt.measure(T) == 30 / 30  # 30 % over the default 2 × 30 s metric window (padded to 30 s)
    names = {(s.name, s.group) for s in m.metric_samples(T)}
    assert ("exempt-request-time", "Request") in names


def test_exempt_list() -> None:
    assert is_request_quota_exempt(4)  # LeaderAndIsr
    assert is_request_quota_exempt(0, acks=0)
    assert not is_request_quota_exempt(0, acks=1)
    assert is_request_quota_exempt(1, follower_fetch=True)
    assert not is_request_quota_exempt(1)
    assert is_request_quota_exempt(63, error_code=42)  # BrokerHeartbeat error
    assert not is_request_quota_exempt(63, error_code=31)  # cluster authorization failure is throttled
    assert not is_request_quota_exempt(63)
