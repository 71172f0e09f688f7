"""Live updates from the store's change log (duck-typed ``store.base.Change``)."""

from __future__ import annotations

from dataclasses import dataclass

from quotaflow.core import DEFAULT, QuotaEntity
from quotaflow.engine import QuotaManagers, QuotaType, apply_changes, java_double_to_int, snapshot_changes
from quotaflow.store.base import Change

T = 1_000_000


@dataclass
class IpTarget:
    calls: list[tuple[str | None, int | None]]

    def update_ip_connection_rate_quota(self, ip: str | None, rate: int | None) -> None:
        self.calls.append((ip, rate))


def test_changes_reach_the_right_manager() -> None:
    managers = QuotaManagers.create()
    ips = IpTarget([])
    changes = [
        Change(1, T, QuotaEntity(user="alice"), "producer_byte_rate", 1000.0),
        Change(2, T, QuotaEntity(client_id=DEFAULT), "consumer_byte_rate", 500.0),
        Change(3, T, QuotaEntity(user="bob smith", client_id="c"), "request_percentage", 12.5),
        Change(4, T, QuotaEntity(ip=DEFAULT), "connection_creation_rate", 10.9),
        Change(5, T, QuotaEntity(ip="10.0.0.1"), "connection_creation_rate", None),
        Change(6, T, QuotaEntity(user=DEFAULT), "controller_mutation_rate", 3.0),
        Change(7, T, QuotaEntity(user="alice"), "SCRAM-SHA-256", 1.0),
    ]
    assert apply_changes(changes, managers, ips) == 7
    assert managers.produce.quota_limit("alice", "x") == 1000
    assert managers.fetch.quota_limit("anyone", "x") == 500
    assert managers.request.quota_limit("bob smith", "c") == 12.5
    assert managers.controller_mutation.quota_limit("zed", "x") == 3
    assert managers.for_type(QuotaType.PRODUCE).quota_types_enabled == 2
    assert ips.calls == [(None, 10), ("10.0.0.1", None)]


def test_removal_and_existing_sensor_update() -> None:
    managers = QuotaManagers.create()
    apply_changes([Change(1, T, QuotaEntity(user="u"), "producer_byte_rate", 10.0)], managers)
    assert managers.produce.record_and_get_throttle_ms("u", "c", 1000, T) > 0
    apply_changes([Change(2, T, QuotaEntity(user="u"), "producer_byte_rate", 1e9)], managers)
    assert managers.produce.record_and_get_throttle_ms("u", "c", 0, T) == 0  # raised live, samples kept
    apply_changes([Change(3, T, QuotaEntity(user="u"), "producer_byte_rate", None)], managers)
    assert not managers.produce.quotas_enabled
    assert apply_changes([], managers) is None


def test_snapshot_seed() -> None:
    managers = QuotaManagers.create()
    apply_changes(snapshot_changes({QuotaEntity(user="u", client_id=DEFAULT): {"producer_byte_rate": 5.0,
                                                                              "consumer_byte_rate": 6.0}}), managers)
    assert managers.produce.quota_limit("u", "any") == 5
    assert managers.fetch.quota_limit("u", "any") == 6


def test_double_to_int() -> None:
    assert [java_double_to_int(v) for v in (10.9, -1.5, 1e12, float("nan"))] == [10, -1, 2147483647, 0]
