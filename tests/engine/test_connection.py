"""ConnectionQuotas against Kafka's ConnectionQuotasTest deterministic cases (TEST-CASES §6)."""

from __future__ import annotations

import math

import pytest

from quotaflow.core.errors import ConnectionThrottledError, InvalidConfigurationError, TooManyConnectionsError
from quotaflow.core.keys import INT_MAX
from quotaflow.engine.connection import Avg, ConnectionQuotaConfig, ConnectionQuotas

T0 = 1_000_000
EXTERNAL, ADMIN, REPLICATION = "EXTERNAL", "ADMIN", "REPLICATION"
IP1, IP2, IP3 = "192.168.1.1", "192.168.1.2", "192.168.1.3"


def kafka_test_quotas(**kw: object) -> ConnectionQuotas:
    cfg = ConnectionQuotaConfig(quota_window_num=2, quota_window_size_seconds=1, inter_broker_listener=REPLICATION,
                                **kw)  # type: ignore[arg-type]
    q = ConnectionQuotas(cfg)
    for listener in (EXTERNAL, ADMIN, REPLICATION):
        q.add_listener(listener)
    return q


def accept_until_throttled(q: ConnectionQuotas, listener: str, ip: str, limit: int = 1000) -> tuple[int, int]:
    """Connections accepted before the first IP throttle, and that throttle."""
    for n in range(limit):
        try:
            q.inc(listener, ip, T0)
        except ConnectionThrottledError as e:
            return n, e.throttle_ms
    return limit, 0


def test_enforced_ip_connection_rate_quota_update() -> None:
    q = kafka_test_quotas()
    q.update_ip_connection_rate_quota(IP1, 20)
    assert accept_until_throttled(q, EXTERNAL, IP1) == (20, 50)
    assert q.get(IP1) == 20
    q.update_ip_connection_rate_quota(IP1, 30)
    assert accept_until_throttled(q, EXTERNAL, IP1) == (10, 33)
    assert q.get(IP1) == 30
    q.update_ip_connection_rate_quota(IP1, None)
    assert accept_until_throttled(q, EXTERNAL, IP1, limit=40) == (40, 0)
    assert q.get(IP1) == 70
    assert accept_until_throttled(q, ADMIN, IP2, limit=40) == (40, 0)
    q.update_ip_connection_rate_quota(None, 20)
    assert accept_until_throttled(q, ADMIN, IP2) == (20, 50)
    assert q.get(IP2) == 60
    assert all(s.value == 0 for s in q.metric_samples(T0) if s.name == "AcceptorBlockedPercent")


def test_rejected_ip_connection_is_unrecorded_from_every_rate() -> None:
    q = kafka_test_quotas()
    q.update_ip_connection_rate_quota(IP1, 0)
    q.update_ip_connection_rate_quota(IP3, 0)
    for listener, ip in ((EXTERNAL, IP1), (REPLICATION, IP3)):
        with pytest.raises(ConnectionThrottledError, match=rf"^/{ip} throttled for 1000$") as info:
            q.inc(listener, ip, T0)
        assert info.value.end_throttle_ms == T0 + 1000
        rates = {(s.name, s.tags): s.value for s in q.metric_samples(T0) if s.name.endswith("accept-rate")}
        assert rates and all(v == 0 for v in rates.values())
    assert q.get(IP1) == 0 and q.total_count == 0


def test_ip_rate_metric_bound_follows_override_then_default() -> None:
    q = kafka_test_quotas()
    q.update_ip_connection_rate_quota(None, 50)
    q.inc(EXTERNAL, IP1, T0)
    q.inc(ADMIN, IP2, T0)
    assert (q.ip_rate_bound(IP1), q.ip_rate_bound(IP2)) == (50, 50)
    q.update_ip_connection_rate_quota(IP1, 30)
    assert q.ip_rate_bound(IP1) == 30
    q.update_ip_connection_rate_quota(None, 20)
    assert (q.ip_rate_bound(IP1), q.ip_rate_bound(IP2)) == (30, 20)
    q.update_ip_connection_rate_quota(None, None)
    assert (q.ip_rate_bound(IP1), q.ip_rate_bound(IP2)) == (30, INT_MAX)
    q.update_ip_connection_rate_quota(IP1, None)
    assert q.ip_rate_bound(IP1) == INT_MAX


def test_unquoted_ip_is_never_recorded() -> None:
    q = kafka_test_quotas()
    for _ in range(100):
        q.inc(EXTERNAL, IP1, T0)
    assert q.ip_rate_bound(IP1) is None
    assert not [s for s in q.metric_samples(T0) if ("ip", IP1) in s.tags]


def test_max_connections_per_ip_counts_then_raises() -> None:
    q = kafka_test_quotas(max_connections_per_ip=17)
    for _ in range(17):
        q.inc(EXTERNAL, IP1, T0)
    for _ in range(2):
        with pytest.raises(TooManyConnectionsError, match=r"^Too many connections from /192\.168\.1\.1 \(maximum = 17"):
            q.inc(EXTERNAL, IP1, T0)
    assert q.get(IP1) == 19
    for _ in range(17):
        q.inc(EXTERNAL, IP2, T0)
    for _ in range(4):
        q.dec(EXTERNAL, IP1)
    assert q.get(IP1) == 15
    q.inc(EXTERNAL, IP1, T0)
    q.inc(EXTERNAL, IP1, T0)
    assert q.get(IP1) == 17


def test_per_ip_count_override() -> None:
    q = kafka_test_quotas(max_connections_per_ip=1, max_connections_per_ip_overrides={IP2: 3})
    for _ in range(3):
        q.inc(EXTERNAL, IP2, T0)
    q.inc(EXTERNAL, IP1, T0)
    with pytest.raises(TooManyConnectionsError, match=r"maximum = 1\)"):
        q.inc(EXTERNAL, IP1, T0)
    with pytest.raises(TooManyConnectionsError, match=r"maximum = 3\)"):
        q.inc(EXTERNAL, IP2, T0)


def test_decrement_unknown_ip_fails() -> None:
    q = kafka_test_quotas()
    msg = "Attempted to decrease connection count for address with no connections, address: /192.168.2.0"
    with pytest.raises(ValueError, match=f"^{msg}$"):
        q.dec(EXTERNAL, "192.168.2.0")


def test_unregistered_listener_fails() -> None:
    with pytest.raises(KeyError):
        ConnectionQuotas().inc(EXTERNAL, IP1, T0)


def test_listener_rate_must_be_above_zero() -> None:
    q = kafka_test_quotas()
    with pytest.raises(InvalidConfigurationError, match=r"^Invalid max\.connection\.creation\.rate 0$"):
        q.update_listener_max_connection_rate(EXTERNAL, 0)
    with pytest.raises(InvalidConfigurationError):
        q.update_broker_max_connection_rate(-1)


def test_broker_rate_delays_but_inter_broker_listener_is_protected() -> None:
    q = kafka_test_quotas(max_connection_creation_rate=1)
    delays = [q.record_connection_and_get_throttle_ms(EXTERNAL, T0) for _ in range(3)]
    assert delays == [0, 1000, 1000]  # 2 and 3 connections over a 1 s padded window vs 1/s, capped at 1 window
    assert [q.record_connection_and_get_throttle_ms(REPLICATION, T0) for _ in range(5)] == [0] * 5
    throttle = {s.tags: s.value for s in q.metric_samples(T0) if s.name == "connection-accept-throttle-time"}
    assert throttle[(("listener", EXTERNAL),)] == 1000
    assert math.isnan(throttle[(("listener", REPLICATION),)])


def test_single_listener_is_never_protected() -> None:
    q = ConnectionQuotas(ConnectionQuotaConfig(quota_window_num=2, max_connection_creation_rate=1,
                                               inter_broker_listener=REPLICATION))
    q.add_listener(REPLICATION)
    assert not q.is_protected(REPLICATION)
    assert [q.record_connection_and_get_throttle_ms(REPLICATION, T0) for _ in range(2)] == [0, 1000]
    q.add_listener(EXTERNAL)
    assert q.is_protected(REPLICATION)


def test_listener_limit_applies_to_inter_broker_listener() -> None:
    q = kafka_test_quotas(listener_rates={REPLICATION: 1})
    assert [q.record_connection_and_get_throttle_ms(REPLICATION, T0) for _ in range(2)] == [0, 1000]


def test_connection_slots_broker_wide_and_per_listener() -> None:
    q = kafka_test_quotas(max_connections=2, listener_max_connections={ADMIN: 1})
    q.inc(EXTERNAL, IP1, T0)
    assert q.connection_slot_available(EXTERNAL) and q.connection_slot_available(ADMIN)
    q.inc(ADMIN, IP2, T0)
    assert not q.connection_slot_available(EXTERNAL)  # broker-wide max.connections reached
    assert not q.connection_slot_available(ADMIN)  # listener max reached
    assert q.connection_slot_available(REPLICATION)  # protected: broker-wide max.connections does not apply
    q.update_listener_max_connections(REPLICATION, 0)
    assert not q.connection_slot_available(REPLICATION)  # but its own listener limit does
    q.dec(EXTERNAL, IP1)
    assert q.connection_slot_available(EXTERNAL) and not q.connection_slot_available(ADMIN)


def test_reconfigure_keeps_samples_and_replaces_bounds() -> None:
    q = kafka_test_quotas()
    for _ in range(3):
        assert q.record_connection_and_get_throttle_ms(EXTERNAL, T0) == 0
    q.reconfigure(ConnectionQuotaConfig(max_connection_creation_rate=2, listener_rates={EXTERNAL: 100},
                                        inter_broker_listener=REPLICATION))
    assert q.broker_rate.bound == 2
    # 4 connections in a 1 s padded window: (4 - 2) / 2 * 1000 = 1000
    assert q.record_connection_and_get_throttle_ms(EXTERNAL, T0) == 1000
    q.reconfigure(ConnectionQuotaConfig())
    assert q.record_connection_and_get_throttle_ms(EXTERNAL, T0) == 0
    assert q.is_protected(REPLICATION)  # inter.broker.listener.name is not dynamic


def test_ip_sensor_expires_after_an_idle_hour() -> None:
    q = kafka_test_quotas()
    q.update_ip_connection_rate_quota(IP1, 5)
    q.inc(EXTERNAL, IP1, T0)
    q.expire_sensors(T0 + 3600 * 1000)
    assert q.ip_rate_bound(IP1) == 5
    q.expire_sensors(T0 + 3600 * 1000 + 1)
    assert q.ip_rate_bound(IP1) is None


def test_metric_names_and_tags() -> None:
    q = kafka_test_quotas()
    q.update_ip_connection_rate_quota(IP1, 5)
    q.inc(EXTERNAL, IP1, T0)
    names = {(s.group, s.name, s.tags) for s in q.metric_samples(T0)}
    assert ("socket-server-metrics", "broker-connection-accept-rate", ()) in names
    assert ("socket-server-metrics", "connection-accept-rate", (("listener", EXTERNAL), ("ip", ""))) in names
    assert ("socket-server-metrics", "connection-accept-rate", (("listener", ""), ("ip", IP1))) in names
    assert ("Acceptor", "AcceptorBlockedPercent", (("listener", ADMIN),)) in names


def test_blocked_percent() -> None:
    q = kafka_test_quotas()
    q.record_acceptor_blocked(EXTERNAL, 500, T0)
    blocked = {s.tags: s.value for s in q.metric_samples(T0) if s.name == "AcceptorBlockedPercent"}
    assert blocked[(("listener", EXTERNAL),)] == pytest.approx(50.0)  # 500 ms in a 1 s padded window
    assert blocked[(("listener", ADMIN),)] == 0


def test_avg_is_nan_without_events_and_purges() -> None:
    avg = Avg(samples=2, window_ms=1000)
    assert math.isnan(avg.measure(T0))
    avg.record(10, T0)
    avg.record(20, T0 + 10)
    assert avg.measure(T0 + 10) == 15
    assert math.isnan(avg.measure(T0 + 5000))
