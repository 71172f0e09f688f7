"""The gateway side of cluster-wide quotas without a broker: settings, the report format, and shares applied to
the engine's sensors (the local engine then throttles against the share, Kafka-exact)."""

from __future__ import annotations

import contextlib
import time

import pytest

from quotaflow.core.entities import QuotaEntity
from quotaflow.core.errors import CommandError
from quotaflow.engine.cluster_share import UsageReport
from quotaflow.engine.quota_type import QuotaType
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.data.broker_quotas import BrokerQuotas
from quotaflow.gateway.data.cluster_quota import (
    ClusterQuotas,
    ClusterQuotaSettings,
    cluster_quotas_for,
    decode_report,
    encode_report,
)
from quotaflow.gateway.data.enforcement import Enforcement
from quotaflow.store.base import ShadowSet, Snapshot

Q = 100_000.0
KEY = (QuotaType.PRODUCE, "", "app")


class FakeExchange:
    """Stands in for the usage topic: reports handed in by the test, publications kept."""

    def __init__(self) -> None:
        self.inbox: list[UsageReport] = []
        self.rejected = 0  # reports refused (unsigned, badly signed, replayed)

    def take(self) -> list[UsageReport]:
        out, self.inbox = self.inbox, []
        return out


def test_settings() -> None:
    assert not ClusterQuotaSettings.from_properties({}).cluster
    s = ClusterQuotaSettings.from_properties({"quotaflow.quota.scope": "cluster",
                                              "quotaflow.quota.cluster.floor.fraction": "0.2",
                                              "quotaflow.quota.cluster.expiry.windows": "5"})
    assert (s.cluster, s.floor_fraction, s.expiry_windows, s.usage_topic) == (True, 0.2, 5, "__quotaflow_usage")
    for bad in ({"quotaflow.quota.scope": "global"}, {"quotaflow.quota.cluster.floor.fraction": "2"},
                {"quotaflow.quota.cluster.expiry.windows": "0"}, {"quotaflow.quota.cluster.expiry.windows": "x"}):
        with pytest.raises(CommandError, match="Invalid value"):
            ClusterQuotaSettings.from_properties(bad)
    broker_quotas = BrokerQuotas(GatewayConfig())
    assert cluster_quotas_for({}, broker_quotas, [("127.0.0.1", 9092)], 1, "gw") is None  # Kafka's per broker


def test_report_round_trip_skips_what_it_does_not_know() -> None:
    rates = {KEY: 1234.5, (QuotaType.REQUEST, "alice", ""): 12.0}
    reports = decode_report(encode_report("gw-1", 1000, {"0": rates, "1": {}}), received_ms=77)
    assert reports == [UsageReport("gw-1/0", 77, rates), UsageReport("gw-1/1", 77, {})]
    odd = (b'{"gateway":"g","participants":{"0":[["CONTROLLER_MUTATION","u","c",1.0],["PRODUCE","u","c",-1],'
           b'["PRODUCE","u","",2]]}}')
    assert decode_report(odd, 1)[0].rates == {(QuotaType.PRODUCE, "u", ""): 2.0}
    with pytest.raises((ValueError, KeyError)):
        decode_report(b"{}", 1)


def test_shares_become_the_sensor_bounds() -> None:
    enforcement = Enforcement(GatewayConfig(quota_window_num=3))
    enforcement.load(Snapshot(1, {QuotaEntity(client_id="app"): {"producer_byte_rate": Q}}))
    settings = ClusterQuotaSettings.from_properties({"quotaflow.quota.scope": "cluster"})
    cq = ClusterQuotas(settings, lambda: {"0": enforcement}, "127.0.0.1:9", window_ms=1000, gateway_id="me")
    exchange = FakeExchange()
    cq.exchange = exchange  # type: ignore[assignment]
    now = 1_000_000
    enforcement.managers.produce.record_and_get_throttle_ms("ANONYMOUS", "app", 1, now)  # traffic makes the sensor
    sensor = enforcement.managers.produce.quota_sensors()[0][1]
    cq.apply(now)
    assert sensor.bound == Q and cq.live_participants == 1  # alone: the whole quota
    exchange.inbox.append(UsageReport("peer/1", now, {(QuotaType.PRODUCE, "", "other"): 5.0}))
    cq.apply(now + 1000)
    # metered here for less than 2 windows: the peer may have started it too and not reported it yet, so Q over
    # every live participant
    assert sensor.bound == pytest.approx(Q / 2)
    cq.published = {"0": {KEY: 0.0}}  # what step() publishes once a window
    cq.apply(now + 2000)
    assert sensor.bound == Q  # settled: a peer that does not meter this quota-id takes no share of it
    exchange.inbox.append(UsageReport("peer/0", now + 2000, {KEY: 0.0}))
    cq.apply(now + 2001)
    assert sensor.bound == pytest.approx(Q / 2)  # a peer that meters it, nobody has traffic: even split
    exchange.inbox.append(UsageReport("peer/0", now + 3500, {KEY: 1e9}, frozenset({KEY})))
    cq.apply(now + 3500)
    # no traffic here, the peer throttled: this gateway keeps the floor, φ · Q / N (its rate is ~0: at once)
    assert sensor.bound == pytest.approx(Q * 0.05)
    samples = {(s.group, s.name): s.value for s in cq.metric_samples(now)}
    assert samples[("Produce", "cluster-share")] == sensor.bound
    assert samples[("ClusterQuota", "live-participants")] == 2  # peer/1 fell silent 3.5 s ago
    cq.apply(now + 3500 + 3 * 1000 + 1)  # and now peer/0 too: alone again, the whole quota at once
    assert sensor.bound == Q and cq.live_participants == 1


def test_shares_divide_the_published_rates() -> None:
    """Every gateway divides the rates everyone published for the last window, its own included, so two gateways
    that see the same reports compute shares that add up to Q (with live rates they could both claim a burst).
    A participant published as throttled wants more than its rate shows: throttled participants are equals."""
    enforcement = Enforcement(GatewayConfig(quota_window_num=3))
    enforcement.load(Snapshot(1, {QuotaEntity(client_id="app"): {"producer_byte_rate": Q}}))
    settings = ClusterQuotaSettings.from_properties({"quotaflow.quota.scope": "cluster"})
    cq = ClusterQuotas(settings, lambda: {"0": enforcement}, "127.0.0.1:9", window_ms=1000, gateway_id="me")
    exchange = FakeExchange()
    cq.exchange = exchange  # type: ignore[assignment]
    now = 1_000_000
    enforcement.managers.produce.record_and_get_throttle_ms("ANONYMOUS", "app", 1, now)
    cq.apply(now - 2000)  # metered here for 2 windows: settled
    cq.published = {"0": {KEY: 30_000.0}}
    exchange.inbox.append(UsageReport("peer/0", now, {KEY: 10_000.0}))
    cq.apply(now)
    # nobody throttled: each gets 1.25 × its rate (37.5k, 12.5k) and the unused 50k evenly
    assert cq.shares["0"][KEY] == pytest.approx(62_500.0)  # the peer computes 37.5k from the same reports: Q
    exchange.inbox.append(UsageReport("peer/0", now + 1000, {KEY: 10_000.0}, frozenset({KEY})))
    cq.apply(now + 1000)  # (a window later: a bound comes down by at most half a window)
    assert cq.shares["0"][KEY] == pytest.approx(37_500.0)  # the throttled peer gets all that is not used here
    cq.published_throttled = {"0": frozenset({KEY})}
    cq.apply(now + 1001)
    assert cq.shares["0"][KEY] == pytest.approx(Q / 2)  # both throttled: equals, whatever their rates


def test_a_throttle_is_published_for_the_rate_window() -> None:
    """A quota-id this gateway throttled within the rate window (3 × 1 s) is published as throttled, in a key of
    the report that a reader without it ignores."""
    enforcement = Enforcement(GatewayConfig(quota_window_num=3))
    enforcement.load(Snapshot(1, {QuotaEntity(client_id="app"): {"producer_byte_rate": Q}}))
    settings = ClusterQuotaSettings.from_properties({"quotaflow.quota.scope": "cluster"})
    cq = ClusterQuotas(settings, lambda: {"0": enforcement}, "127.0.0.1:9", window_ms=1000, gateway_id="me")
    cq.exchange = FakeExchange()  # type: ignore[assignment]
    produce = enforcement.managers.produce
    now = 1_000_000
    assert produce.record_and_get_throttle_ms("ANONYMOUS", "app", 10 * Q, now) > 0
    produce.throttle("ANONYMOUS", "app", 500, now)
    value = cq.step(now, now)
    assert value is not None
    reports = {r.participant: r for r in decode_report(value, now)}
    assert reports["me/0"].throttled == {KEY}
    assert reports["me/presence"].rates == {}  # every report names the gateway: an idle one counts as live too
    assert cq.step(now + 1000, now + 3500) is not None
    later = cq.step(now + 2000, now + 3501) or b""
    assert {r.participant: r for r in decode_report(later, now)}["me/0"].throttled == frozenset()  # 3 s after
    older = decode_report(value.replace(b'"throttled"', b'"other"'), now)  # a reader without the key: no throttles
    assert all(r.throttled == frozenset() for r in older)


def test_a_new_sensor_starts_at_q_over_the_live_gateways() -> None:
    """Before the next share update a quota-id's new sensor runs at the configured value over the live gateways: N
    gateways whose clients start at once must not each admit Q (Kafka's first window lets 2 s × Q through)."""
    enforcement = Enforcement(GatewayConfig(quota_window_num=3))
    enforcement.load(Snapshot(1, {QuotaEntity(client_id="app"): {"producer_byte_rate": Q}}))
    settings = ClusterQuotaSettings.from_properties({"quotaflow.quota.scope": "cluster"})
    cq = ClusterQuotas(settings, lambda: {"0": enforcement}, "127.0.0.1:9", window_ms=1000, gateway_id="me")
    exchange = FakeExchange()
    cq.exchange = exchange  # type: ignore[assignment]
    now = 1_000_000
    exchange.inbox.extend(decode_report(encode_report("idle", 1000, {"presence": {}}), now))  # a peer, idle
    cq.apply(now)
    assert cq.live_participants == 1  # the idle peer's presence is not a participant
    enforcement.managers.produce.record_and_get_throttle_ms("ANONYMOUS", "app", 1, now)
    assert enforcement.managers.produce.quota_sensors()[0][1].bound == Q / 2


def test_ip_connection_rates_are_a_participant_of_their_own() -> None:
    """With the gateway's connection quotas attached, the per-IP creation rates travel in the same report (as the
    ``connections`` participant), peers' IP rates divide the IP quota, and the share bounds the IP's sensor."""
    from quotaflow.core.errors import ConnectionThrottledError
    from quotaflow.engine.cluster_share import CONNECTIONS, ip_key
    from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas

    connections = ConnectionQuotas(ConnectionQuotaConfig(quota_window_num=3))
    connections.add_listener("PLAINTEXT")
    connections.update_ip_connection_rate_quota("10.1.2.3", 10)
    settings = ClusterQuotaSettings.from_properties({"quotaflow.quota.scope": "cluster"})
    cq = ClusterQuotas(settings, dict, "127.0.0.1:9", window_ms=1000, gateway_id="me", connections=connections)
    exchange = FakeExchange()
    cq.exchange = exchange  # type: ignore[assignment]
    now = 1_000_000
    engine_now = time.time_ns() // 1_000_000  # ClusterQuotas reads the engine's (wall) clock itself
    connections.inc("PLAINTEXT", "10.1.2.3", engine_now)
    own = cq.apply(now)
    ip = ip_key("10.1.2.3")
    assert set(own) == {CONNECTIONS} and own[CONNECTIONS][ip] > 0
    assert connections.ip_rate_bound("10.1.2.3") == 10  # alone: the whole quota
    report = decode_report(encode_report("peer", 1000, {CONNECTIONS: {ip: 3.0}, "0": {KEY: 1.0}}), now)
    assert [r.rates for r in report] == [{ip: 3.0}, {KEY: 1.0}]
    exchange.inbox.extend(report)
    cq.published = {CONNECTIONS: {ip: 3.0}}
    cq.apply(now + 1000)
    assert connections.ip_rate_bound("10.1.2.3") == pytest.approx(5.0)  # same demand: half of the IP quota
    assert cq.live_participants == 1  # the peer's broker participant; connection participants are not counted
    samples = {(s.group, s.name, s.tags): s.value for s in cq.metric_samples(now)}
    assert samples[("socket-server-metrics", "ip-connection-cluster-share", (("ip", "10.1.2.3"),))] == 5.0
    # the sensor enforces the share: Kafka's rate divides by at least (samples - 1) windows, 2 s here, so a burst
    # admits about 2 × 5 connections (2 × 10 = all 21 under the configured quota)
    for _ in range(20):
        with contextlib.suppress(ConnectionThrottledError):
            connections.inc("PLAINTEXT", "10.1.2.3", engine_now + 10)
    assert 9 <= connections.get("10.1.2.3") <= 12


def test_a_shadow_sets_sensors_get_their_share_of_the_shadows_quota_as_the_live_ones_do() -> None:
    """quotaflow.quota.scope=cluster with a shadow set running: the shadow's bound of a quota-id is its local share of
    the shadow's value, from the same published usage as the live share of the live value."""
    quotas = BrokerQuotas(GatewayConfig(quota_window_num=3))
    quotas.load(Snapshot(1, {QuotaEntity(client_id="app"): {"producer_byte_rate": Q}}))
    enforcement = quotas.for_broker("0")
    quotas.start_shadow(ShadowSet(5, "half", "ops", 0, ((QuotaEntity(client_id="app"),
                                                         {"producer_byte_rate": Q / 2}),)))
    assert enforcement.shadow is not None
    settings = ClusterQuotaSettings.from_properties({"quotaflow.quota.scope": "cluster"})
    cq = ClusterQuotas(settings, lambda: quotas.brokers, "127.0.0.1:9", window_ms=1000, gateway_id="me")
    exchange = FakeExchange()
    cq.exchange = exchange  # type: ignore[assignment]
    now = 1_000_000
    for managers in (enforcement.managers, enforcement.shadow.managers):
        managers.produce.record_and_get_throttle_ms("ANONYMOUS", "app", 1, now)
    live = enforcement.managers.produce.quota_sensors()[0][1]
    shadow = enforcement.shadow.managers.produce.quota_sensors()[0][1]
    cq.apply(now - 2000)  # metered here for 2 windows: settled
    cq.published = {"0": {KEY: 30_000.0}}
    exchange.inbox.append(UsageReport("peer/0", now, {KEY: 10_000.0}))
    cq.apply(now)
    assert live.bound == pytest.approx(1.25 * 30_000 + (Q - 1.25 * 40_000) / 2)
    assert shadow.bound == pytest.approx(1.25 * 30_000)  # the same treatment: the demands fill Q / 2 exactly
    quotas.stop_shadow()
    cq.apply(now + 250)  # no shadow: nothing else changes
    assert live.bound == pytest.approx(1.25 * 30_000 + (Q - 1.25 * 40_000) / 2)


def test_a_shadow_sets_ip_connection_rates_get_their_share_too() -> None:
    from quotaflow.engine.cluster_share import CONNECTIONS, ip_key
    from quotaflow.engine.connection import ConnectionQuotaConfig
    from quotaflow.gateway.observation.connection_events import ObservedConnectionQuotas

    connections = ObservedConnectionQuotas(ConnectionQuotaConfig(quota_window_num=3))
    connections.add_listener("PLAINTEXT")
    connections.update_ip_connection_rate_quota("10.1.2.3", 10)
    shadow = connections.start_shadow(1)
    shadow.update_ip_connection_rate_quota("10.1.2.3", 4)
    settings = ClusterQuotaSettings.from_properties({"quotaflow.quota.scope": "cluster"})
    cq = ClusterQuotas(settings, dict, "127.0.0.1:9", window_ms=1000, gateway_id="me", connections=connections)
    exchange = FakeExchange()
    cq.exchange = exchange  # type: ignore[assignment]
    now = 1_000_000
    engine_now = time.time_ns() // 1_000_000
    connections.record_connection_and_get_throttle_ms("PLAINTEXT", engine_now)
    connections.record_ip_connection_maybe_throttle("PLAINTEXT", "10.1.2.3", engine_now)
    ip = ip_key("10.1.2.3")
    exchange.inbox.extend(decode_report(encode_report("peer", 1000, {CONNECTIONS: {ip: 3.0}}), now))
    cq.published = {CONNECTIONS: {ip: 3.0}}
    cq.apply(now)
    assert connections.ip_rate_bound("10.1.2.3") == pytest.approx(5.0)  # same demand: half of each quota
    assert shadow.ip_rate_bound("10.1.2.3") == pytest.approx(2.0)
