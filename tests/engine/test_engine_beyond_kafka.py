"""The engine beyond Kafka's model: prefix buckets in the client quota managers, CIDR ranges and per-principal
connection rates in the connection quotas, and the store change dispatch that feeds them (issue 20)."""

from __future__ import annotations

import pytest

from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.errors import ConnectionThrottledError
from quotaflow.core.keys import INT_MAX, UNLIMITED
from quotaflow.core.precedence import PREFIX_TAG_USER
from quotaflow.engine import QuotaManagers, QuotaType, apply_changes
from quotaflow.engine.client_quota import ClientQuotaManager, QuotaId
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas
from quotaflow.engine.updates import snapshot_changes

T0 = 1_000_000


def test_prefix_clients_share_one_sensor_and_an_exact_client_id_has_its_own() -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE, samples=2, window_seconds=1)
    m.update_quota(None, None, 1000.0, client_id_prefix="etl-")
    m.update_quota(None, "etl-exact", 50.0)
    assert m.quota_types_enabled == 1
    assert m.quota_id("u", "etl-1") == m.quota_id("v", "etl-2") == QuotaId(PREFIX_TAG_USER, "etl-")
    assert m.quota_id("u", "etl-exact") == QuotaId("", "etl-exact")
    assert m.quota_limit("u", "etl-1") == 1000.0 and m.quota_limit("u", "etl-exact") == 50.0
    # 600 + 600 bytes in one instant: together over 1000/s (one padded 1 s window), each alone would not be
    assert m.record_and_get_throttle_ms("u", "etl-1", 600.0, T0) == 0
    assert m.record_and_get_throttle_ms("v", "etl-2", 600.0, T0) > 0
    assert m.sensor_count == 1
    assert "Produce-<client-id-prefix>:etl-" in m.sensor_names()


def test_prefix_changes_rebound_live_sensors_and_removal_restores_kafkas_tags() -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE, samples=2, window_seconds=1)
    m.update_quota(None, None, 1000.0, client_id_prefix="etl-")
    m.record_and_get_throttle_ms("u", "etl-1", 10.0, T0)
    sensor = m.existing_sensor("u", "etl-1")
    assert sensor is not None
    m.update_quota(None, None, 10.0, client_id_prefix="etl-")  # a scan: the bucket's bound follows
    assert sensor.bound == 10.0
    m.update_quota(None, DEFAULT, 5.0)
    m.update_quota(None, None, None, client_id_prefix="etl-")
    assert m.quota_id("u", "etl-1") == QuotaId("", "etl-1") and m.quota_limit("u", "etl-1") == 5.0
    assert not m.prefixes


def test_metric_tags_stay_kafkas_two() -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE, samples=2, window_seconds=1)
    m.update_quota(None, None, 1000.0, client_id_prefix="etl-")
    m.record_and_get_throttle_ms("u", "etl-1", 10.0, T0)
    tags = {s.tags for s in m.metric_samples(T0) if s.name == "byte-rate"}
    assert tags == {(("user", PREFIX_TAG_USER), ("client-id", "etl-"))}


def test_each_address_in_a_range_is_limited_as_its_own_entity() -> None:
    q = ConnectionQuotas(ConnectionQuotaConfig(quota_window_num=2, quota_window_size_seconds=1))
    q.add_listener("PLAINTEXT")
    q.update_ip_connection_rate_quota("10.1.0.0/16", 2)
    q.update_ip_connection_rate_quota("10.1.2.0/24", 3)
    q.update_ip_connection_rate_quota("10.1.2.9", 1)
    q.update_ip_connection_rate_quota(None, 50)
    assert [q.connection_rate_for_ip(ip) for ip in ("10.1.2.9", "10.1.2.3", "10.1.7.7", "10.2.0.1")] == [1, 3, 2, 50]
    assert q.ip_range_for("10.1.2.3") == "10.1.2.0/24" and q.ip_range_for("10.1.2.9") is None

    def accepted(ip: str, n: int) -> int:
        ok = 0
        for _ in range(n):
            try:
                q.inc("PLAINTEXT", ip, T0)
                ok += 1
            except ConnectionThrottledError:
                pass
        return ok

    # at one instant with 2 x 1 s windows, an address is throttled above rate x 1 s: each address its own sensor
    assert accepted("10.1.7.7", 5) == 2 and accepted("10.1.8.8", 5) == 2  # two addresses of the /16: 2 each
    assert accepted("10.1.2.3", 5) == 3
    q.update_ip_connection_rate_quota("10.1.0.0/16", None)  # removing the range re-bounds its addresses' sensors
    assert q.ip_rate_bound("10.1.7.7") == 50.0
    # an exact entity set or removed after the address's rate was looked up (and cached) takes over at once
    q.update_ip_connection_rate_quota("10.1.2.3", 7)
    assert q.connection_rate_for_ip("10.1.2.3") == 7 and q.ip_rate_bound("10.1.2.3") == 7.0
    q.update_ip_connection_rate_quota("10.1.2.3", None)
    assert q.connection_rate_for_ip("10.1.2.3") == 3


def test_a_principal_over_its_connection_rate_is_throttled_then_unrecorded() -> None:
    q = ConnectionQuotas(ConnectionQuotaConfig(quota_window_num=2, quota_window_size_seconds=1))
    q.update_principal_connection_rate_quota("alice", 2)
    assert q.record_principal_connection_and_get_throttle_ms("bob", T0) == 0  # no rate: never recorded
    results = [q.record_principal_connection_and_get_throttle_ms("alice", T0) for _ in range(4)]
    assert results[:2] == [0, 0] and all(0 < t <= 1000 for t in results[2:])
    q.update_principal_connection_rate_quota(None, 1)  # the default user now limits bob
    assert q.connection_rate_for_principal("bob") == 1 and q.connection_rate_for_principal("alice") == 2
    names = {s.name for s in q.metric_samples(T0)}
    assert "principal-connection-accept-rate" in names


def test_store_changes_reach_the_new_targets() -> None:
    managers = QuotaManagers.create()
    conn = ConnectionQuotas()
    entities = {
        QuotaEntity(client_id_prefix="etl-"): {"producer_byte_rate": 10.0},
        QuotaEntity(ip="10.0.0.0/8"): {"connection_creation_rate": 4.0},
        QuotaEntity(user="alice"): {"connection_creation_rate": 3.0, "request_percentage": 5.0},
        QuotaEntity(user=DEFAULT): {"connection_creation_rate": 9.0},
    }
    apply_changes(snapshot_changes(entities), managers, conn)
    assert managers.produce.quota_limit("u", "etl-x") == 10.0
    assert conn.connection_rate_for_ip("10.9.9.9") == 4 and conn.connection_rate_for_ip("11.0.0.1") == INT_MAX
    assert conn.connection_rate_for_principal("alice") == 3 and conn.connection_rate_for_principal("zed") == 9
    assert managers.request.quota_limit("alice", "c") == 5.0


@pytest.mark.parametrize("n", [0, 10_000])
def test_lookups_answer_the_same_with_many_prefixes(n: int) -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE)
    for i in range(n):
        m.update_quota(None, None, 1.0 + i, client_id_prefix=f"team-{i:05d}-")
    m.update_quota(None, None, 0.5, client_id_prefix="etl-")
    assert m.quota_limit("u", "etl-9") == 0.5
    assert m.quota_limit("u", "team-00007-app") == (8.0 if n else float(2**63 - 1))


def test_quota_limit_asked_before_a_change_follows_it() -> None:
    """quota_limit is kept per (user, client-id) for the gateway's per-request check; every change drops it."""
    m = ClientQuotaManager(QuotaType.PRODUCE, samples=2, window_seconds=1)
    m.update_quota(None, "c", 100.0)
    assert m.quota_limit("u", "c") == 100.0
    m.update_quota(None, "c", 7.0)
    assert m.quota_limit("u", "c") == 7.0
    m.update_quota(None, None, 3.0, client_id_prefix="c")
    m.update_quota(None, "c", None)
    assert m.quota_limit("u", "c") == 3.0
    m.update_quota(None, None, None, client_id_prefix="c")
    assert m.quota_limit("u", "c") == UNLIMITED
