"""Per-IP connection creation rates shared across gateways (``quotaflow.quota.scope=cluster``), pure: two gateways'
KIP-612 connection quotas, their share tables and the reports between them, driven on one simulated clock.

Kafka's windowed rate (here 3 samples of 1 s) admits a flat-out IP in bursts: a cycle of about 4 s (a burst, then
nothing until the burst leaves the window), so rates are means over whole multiples of it (16 or 24 s)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from quotaflow.core.errors import ConnectionThrottledError
from quotaflow.engine.cluster_share import (
    CONNECTIONS,
    ShareTable,
    UsageKey,
    UsageReport,
    ip_key,
    participant_id,
    share_ip_connection_rates,
    smooth,
)
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas

Q = 20  # connection_creation_rate of the ip default, connections/s
IP = "10.0.0.7"
LISTENER = "PLAINTEXT"
WINDOW_MS = 1000
APPLY_MS = 250  # the gateway applies shares four times a window
ATTEMPT_EVERY_MS = 10  # each gateway is offered 100 connections/s from IP, 5 × Q


@dataclass
class Gateway:
    name: str
    quotas: ConnectionQuotas = field(init=False)
    table: ShareTable = field(init=False)
    published: dict[UsageKey, float] = field(default_factory=dict)
    accepted: list[int] = field(default_factory=list)  # accept times (ms)

    def __post_init__(self) -> None:
        self.quotas = ConnectionQuotas(ConnectionQuotaConfig(quota_window_num=3, quota_window_size_seconds=1))
        self.quotas.add_listener(LISTENER)
        self.quotas.update_ip_connection_rate_quota(None, Q)
        self.table = ShareTable(self.name, WINDOW_MS, expiry_windows=2)

    def connect(self, ip: str, now_ms: int) -> None:
        delay = self.quotas.record_connection_and_get_throttle_ms(LISTENER, now_ms)
        assert delay == 0  # no broker/listener rate: those stay local and are not set here
        try:
            self.quotas.record_ip_connection_maybe_throttle(LISTENER, ip, now_ms)
        except ConnectionThrottledError:
            return
        self.accepted.append(now_ms)

    def apply(self, now_ms: int) -> tuple[dict[UsageKey, float], dict[UsageKey, float]]:
        return share_ip_connection_rates(self.table, self.quotas, self.name, self.published, now_ms, now_ms)

    def publish(self, rates: dict[UsageKey, float], now_ms: int, peers: list[Gateway]) -> None:
        self.published = smooth(self.published, rates)
        for peer in peers:
            peer.table.receive(UsageReport(participant_id(self.name, CONNECTIONS), now_ms, dict(self.published)))

    def rate(self, start_ms: int, end_ms: int) -> float:
        return sum(1 for t in self.accepted if start_ms <= t < end_ms) * 1000 / (end_ms - start_ms)


def run(gateways: list[Gateway], until_ms: int, shared: bool, silent_from: dict[str, int] | None = None) -> None:
    """Every gateway is offered connections from IP flat out; with ``shared`` each applies its share 4× a window
    and publishes its rates once a window to the others (a gateway in ``silent_from`` stops at that time)."""
    silent_from = silent_from or {}
    for now in range(0, until_ms, ATTEMPT_EVERY_MS):
        live = [g for g in gateways if now < silent_from.get(g.name, until_ms)]
        for g in live:
            g.connect(IP, now)
        if shared and now % APPLY_MS == 0:
            for g in live:
                rates, _ = g.apply(now)
                if now % WINDOW_MS == 0:
                    g.publish(rates, now, [p for p in live if p is not g])


def test_two_gateways_admit_about_q_from_one_ip_in_total() -> None:
    a, b = Gateway("a"), Gateway("b")
    run([a, b], 30_000, shared=True)
    ra, rb = a.rate(6_000, 30_000), b.rate(6_000, 30_000)
    assert 0.85 * Q <= ra + rb <= 1.15 * Q, (ra, rb)
    assert min(ra, rb) > 0.04 * Q  # each keeps at least about the floor share
    for g in (a, b):  # the bound the engine enforces is the share, not the configured quota
        bound = g.quotas.ip_rate_bound(IP)
        assert bound is not None and bound < Q
    assert (a.quotas.ip_rate_bound(IP) or 0) + (b.quotas.ip_rate_bound(IP) or 0) == pytest.approx(Q, rel=0.05)


def test_without_sharing_each_gateway_admits_q() -> None:
    """The control: the same offered load without shares is Kafka's per-broker semantics, about 2 × Q."""
    a, b = Gateway("a"), Gateway("b")
    run([a, b], 30_000, shared=False)
    total = a.rate(6_000, 30_000) + b.rate(6_000, 30_000)
    assert 1.8 * Q <= total <= 2.2 * Q, total


def test_a_silent_peer_expires_and_the_survivor_takes_the_whole_quota() -> None:
    a, b = Gateway("a"), Gateway("b")
    run([a, b], 30_000, shared=True, silent_from={"b": 10_000})
    assert a.table.live_peers(30_000) == []
    assert a.quotas.ip_rate_bound(IP) == pytest.approx(Q)
    assert 0.85 * Q <= a.rate(14_000, 30_000) <= 1.15 * Q


def test_an_ip_without_quota_or_sensor_is_not_shared() -> None:
    a = Gateway("a")
    a.quotas.update_ip_connection_rate_quota(None, None)  # no quota at all: never recorded, nothing to share
    a.connect(IP, 0)
    rates, applied = a.apply(0)
    assert rates == {} and applied == {}
    a.quotas.update_ip_connection_rate_quota(IP, Q)
    a.connect(IP, 10)
    rates, applied = a.apply(20)
    assert set(rates) == {ip_key(IP)} and applied == {ip_key(IP): Q}  # alone: the whole quota


def test_an_ip_leaves_the_report_once_it_stops_trying_for_the_rate_samples() -> None:
    """Throttled attempts keep an IP in the report (its rate reads 0 between Kafka's bursts); an IP that has not
    tried for ``quota.window.num`` windows (3 s here) leaves it, so the report grows with the active addresses."""
    a = Gateway("a")
    a.connect(IP, 0)
    a.connect("10.0.0.8", 0)
    for t in range(10, 2_000, 10):
        a.connect(IP, t)  # flat out: most are throttled
    rates, _ = a.apply(3_000)
    assert set(rates) == {ip_key(IP), ip_key("10.0.0.8")}
    rates, _ = a.apply(3_001)
    assert set(rates) == {ip_key(IP)}
    rates, _ = a.apply(5_000)
    assert rates == {}
