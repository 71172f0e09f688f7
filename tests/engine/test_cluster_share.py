"""Local shares of a cluster-wide quota (docs/cluster-quotas.md): max-min fair over the participants' demands with a
floor, summing to Q, throttled participants as equals, an even split without usage, silent peers expire."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from quotaflow.engine.cluster_share import (
    ShareTable,
    UsageKey,
    UsageReport,
    demand,
    fair_shares,
    limit_decrease,
    smooth,
)
from quotaflow.engine.quota_type import QuotaType

KEY: UsageKey = (QuotaType.PRODUCE, "", "app")
OTHER: UsageKey = (QuotaType.REQUEST, "alice", "")


INF = float("inf")


def test_the_documented_example() -> None:
    """Q = 10 MB/s, 4 gateways, φ = 0.1. A is throttled, B, C, D are not and use 1 MB/s each: they get 1.25 MB/s
    (their rate and room to grow), A the rest, 6.25 MB/s. All four throttled: 2.5 MB/s each, whatever their rates."""
    rates = (9e6, 1e6, 1e6, 1e6)
    assert fair_shares(10e6, [demand(r, i == 0) for i, r in enumerate(rates)], 0.1) == pytest.approx(
        [6.25e6, 1.25e6, 1.25e6, 1.25e6])
    assert fair_shares(10e6, [demand(r, True) for r in rates], 0.1) == pytest.approx([2.5e6] * 4)


def test_what_nobody_demands_is_split_evenly_and_nobody_gets_more_than_q() -> None:
    assert fair_shares(900.0, [0.0, 0.0, 0.0]) == [300.0, 300.0, 300.0]
    assert fair_shares(900.0, [INF]) == [900.0]  # alone
    # nobody throttled: each its demand (125, and the floor 50), the unused 825 evenly
    unthrottled = fair_shares(1000.0, [demand(100.0, False), demand(0.0, False)])
    assert unthrottled == pytest.approx([125.0 + 412.5, 50.0 + 412.5])
    # one throttled participant and one idle: the idle one keeps the floor φ · Q / N, the throttled one the rest
    assert fair_shares(1000.0, [INF, demand(0.0, False)]) == pytest.approx([950.0, 50.0])
    assert fair_shares(1000.0, []) == []


@given(st.floats(1.0, 1e9), st.lists(st.one_of(st.floats(0.0, 1e9), st.just(INF)), min_size=1, max_size=8),
       st.floats(0.0, 1.0))
@example(quota=1.0, demands=[5e-324], phi=0.5)  # a denormal demand
def test_shares_sum_to_q_keep_the_floor_and_are_max_min_fair(quota: float, demands: list[float], phi: float) -> None:
    shares = fair_shares(quota, demands, phi)
    assert math.isclose(sum(shares), quota, rel_tol=1e-9)
    floor = phi * quota / len(demands)
    assert all(s >= floor * (1 - 1e-9) for s in shares)
    if sum(max(floor, d) for d in demands) >= quota:  # contended: nobody above its demand, and whoever is held
        for s, d in zip(shares, demands, strict=True):  # below its demand gets at least every other share
            assert s <= max(floor, d) * (1 + 1e-9)
            if s < max(floor, d) * (1 - 1e-9):
                assert all(s >= o * (1 - 1e-9) for o in shares)


def test_table_counts_live_participants_and_expires_silent_ones() -> None:
    table = ShareTable("me", window_ms=1000, expiry_windows=3, floor_fraction=0.1)
    assert table.shares({KEY: 1000.0}, {"me/1": {KEY: 0.0}}, now_ms=0) == {"me/1": {KEY: 1000.0}}  # alone: all of Q
    table.receive(UsageReport("peer/1", 0, {KEY: 300.0, OTHER: 0.0}, frozenset({KEY})))
    table.receive(UsageReport("me/1", 0, {KEY: 1e9}))  # our own report, echoed by the topic: ignored
    shares = table.shares({KEY: 1000.0, OTHER: 50.0}, {"me/1": {KEY: 100.0, OTHER: 0.0}}, now_ms=1000)
    # N = 2: me unthrottled at 100 demands 125, the throttled peer the rest (875); OTHER: both meter it, nobody uses
    # it: even split
    assert shares == {"me/1": {KEY: pytest.approx(125.0), OTHER: 25.0}}
    table.receive(UsageReport("peer/1", 2500, {KEY: 100.0}))
    table.receive(UsageReport("peer/1", 2000, {KEY: 999.0}))  # an older report arriving late changes nothing
    assert table.shares({KEY: 1000.0}, {"me/1": {KEY: 100.0}}, now_ms=3000) == {"me/1": {KEY: pytest.approx(500.0)}}
    assert table.expire(5500) == [] and table.expire(5501) == ["peer/1"]  # silent for more than 3 windows
    assert table.shares({KEY: 1000.0}, {"me/1": {KEY: 100.0}}, now_ms=5501) == {"me/1": {KEY: 1000.0}}


def test_every_broker_of_a_gateway_is_a_participant() -> None:
    """A gateway in front of two brokers takes part twice (Kafka enforces per broker); N of a quota-id counts the
    participants that meter it, and quota-ids without a configured value are left alone."""
    table = ShareTable("me", window_ms=1000)
    table.receive(UsageReport("peer/7", 0, {KEY: 200.0}, frozenset({KEY})))
    table.receive(UsageReport("peer/8", 0, {OTHER: 1.0}))  # does not meter KEY: not among KEY's participants
    shares = table.shares({KEY: 900.0}, {"me/1": {KEY: 100.0}, "me/2": {KEY: 0.0, OTHER: 5.0}, "me/3": {}},
                          now_ms=0, throttled={"me/1": {KEY}})
    floor = 0.1 * 900.0 / 3
    assert shares == {"me/1": {KEY: pytest.approx((900.0 - floor) / 2)}, "me/2": {KEY: pytest.approx(floor)},
                      "me/3": {}}


def test_a_participant_without_a_rate_yet_gets_q_over_the_live_gateways() -> None:
    """Its demand is unknown, and its peers may have started the quota-id at the same moment without having
    reported it yet: Q over every live gateway, metering the quota-id or not (or over N, if more participants
    meter it)."""
    table = ShareTable("me", window_ms=1000)
    table.receive(UsageReport("peer/1", 0, {KEY: 900.0}))
    assert table.shares({KEY: 1000.0}, {"me/1": {KEY: None}}, now_ms=0) == {"me/1": {KEY: 500.0}}
    assert table.shares({KEY: 1000.0}, {"me/1": {KEY: 0.0}}, now_ms=0) == {"me/1": {KEY: pytest.approx(50.0)}}
    for peer in ("peer/2", "other/1", "other/connections", "third/gateway"):
        table.receive(UsageReport(peer, 0, {}))  # live, not metering KEY (yet): 3 gateways besides this one
    assert table.shares({KEY: 1000.0}, {"me/1": {KEY: None}, "me/gateway": {}}, now_ms=0) == {
        "me/1": {KEY: 250.0}, "me/gateway": {}}
    assert table.shares({KEY: 1000.0}, {"me/1": {KEY: 900.0}}, now_ms=0) == {"me/1": {KEY: 500.0}}


def test_bounds_fall_to_half_the_rate_at_most_and_rise_at_once() -> None:
    """Kafka's throttle (rate − bound) / bound × window is then at most one rate window."""
    assert limit_decrease(100.0, 800.0, rate=1000.0) == 500.0
    assert limit_decrease(100.0, 800.0, rate=2000.0) == 800.0  # never above where it was
    assert limit_decrease(100.0, 800.0, rate=120.0) == 100.0  # the rate is down: the target at once
    assert limit_decrease(900.0, 100.0, rate=5000.0) == 900.0


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        ShareTable("me", window_ms=0)
    with pytest.raises(ValueError):
        ShareTable("me", window_ms=1000, floor_fraction=1.5)


def test_published_rates_are_smoothed_window_by_window() -> None:
    first = smooth({}, {KEY: 1000.0})
    assert first == {KEY: 1000.0}  # a new quota-id starts at its rate
    assert smooth(first, {KEY: 0.0, OTHER: 5.0}) == {KEY: pytest.approx(700.0), OTHER: 5.0}
