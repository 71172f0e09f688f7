"""Local shares of a cluster-wide quota (docs/cluster-quotas.md): demand-proportional with a floor, summing to Q,
an even split without usage, silent peers expire."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from quotaflow.engine.cluster_share import ShareTable, UsageKey, UsageReport, limit_decrease, local_share, smooth
from quotaflow.engine.quota_type import QuotaType

KEY: UsageKey = (QuotaType.PRODUCE, "", "app")
OTHER: UsageKey = (QuotaType.REQUEST, "alice", "")


def test_the_documented_example() -> None:
    """Q = 10 MB/s, 4 gateways, φ = 0.1, R = 12 MB/s of which A carries 9: A = 7.0, B = C = D = 1.0."""
    shares = [local_share(10e6, 4, r, 12e6, 0.1) for r in (9e6, 1e6, 1e6, 1e6)]
    assert shares == pytest.approx([7.0e6, 1.0e6, 1.0e6, 1.0e6])


def test_even_split_without_usage_and_never_more_than_q() -> None:
    assert local_share(900.0, 3, 0.0, 0.0) == 300.0
    assert local_share(900.0, 0, 0.0, 0.0) == 900.0  # alone
    # a stale R smaller than r_g is taken as r_g: at most Q minus the other gateway's floor, never more than Q
    assert local_share(1000.0, 2, 50.0, 10.0) == 950.0
    assert local_share(1000.0, 2, 0.0, 500.0) == pytest.approx(50.0)  # the floor: φ · Q / N


@given(st.floats(1.0, 1e9), st.lists(st.floats(0.0, 1e9), min_size=1, max_size=8), st.floats(0.0, 1.0))
@example(quota=1.0, rates=[5e-324], phi=0.5)  # a denormal rate: (Q − N·floor) · r underflowed before ÷ R
def test_shares_sum_to_q(quota: float, rates: list[float], phi: float) -> None:
    total = sum(rates)
    shares = [local_share(quota, len(rates), r, total, phi) for r in rates]
    assert math.isclose(sum(shares), quota, rel_tol=1e-9)
    assert all(s >= phi * quota / len(rates) - 1e-6 for s in shares)


def test_table_counts_live_participants_and_expires_silent_ones() -> None:
    table = ShareTable("me", window_ms=1000, expiry_windows=3, floor_fraction=0.1)
    assert table.shares({KEY: 1000.0}, {"me/1": {KEY: 0.0}}, now_ms=0) == {"me/1": {KEY: 1000.0}}  # alone: all of Q
    table.receive(UsageReport("peer/1", 0, {KEY: 300.0, OTHER: 0.0}))
    table.receive(UsageReport("me/1", 0, {KEY: 1e9}))  # our own report, echoed by the topic: ignored
    shares = table.shares({KEY: 1000.0, OTHER: 50.0}, {"me/1": {KEY: 100.0, OTHER: 0.0}}, now_ms=1000)
    # N = 2, floor 50: me = 50 + 900 · 100/400 = 275 (the peer gets 50 + 900 · 300/400 = 725); OTHER: both meter
    # it, nobody uses it: even split
    assert shares == {"me/1": {KEY: pytest.approx(275.0), OTHER: 25.0}}
    table.receive(UsageReport("peer/1", 2500, {KEY: 100.0}))
    table.receive(UsageReport("peer/1", 2000, {KEY: 999.0}))  # an older report arriving late changes nothing
    assert table.shares({KEY: 1000.0}, {"me/1": {KEY: 100.0}}, now_ms=3000) == {"me/1": {KEY: pytest.approx(500.0)}}
    assert table.expire(5500) == [] and table.expire(5501) == ["peer/1"]  # silent for more than 3 windows
    assert table.shares({KEY: 1000.0}, {"me/1": {KEY: 100.0}}, now_ms=5501) == {"me/1": {KEY: 1000.0}}


def test_every_broker_of_a_gateway_is_a_participant() -> None:
    """A gateway in front of two brokers takes part twice (Kafka enforces per broker); N of a quota-id counts the
    participants that meter it, and quota-ids without a configured value are left alone."""
    table = ShareTable("me", window_ms=1000)
    table.receive(UsageReport("peer/7", 0, {KEY: 200.0}))
    table.receive(UsageReport("peer/8", 0, {OTHER: 1.0}))  # does not meter KEY: not among KEY's participants
    shares = table.shares({KEY: 900.0}, {"me/1": {KEY: 100.0}, "me/2": {KEY: 0.0, OTHER: 5.0}, "me/3": {}},
                          now_ms=0)
    floor = 0.1 * 900.0 / 3
    assert shares == {"me/1": {KEY: pytest.approx(floor + (900.0 - 3 * floor) * 100.0 / 300.0)},
                      "me/2": {KEY: pytest.approx(floor)}, "me/3": {}}


def test_a_participant_without_a_rate_yet_gets_the_even_split() -> None:
    table = ShareTable("me", window_ms=1000)
    table.receive(UsageReport("peer/1", 0, {KEY: 900.0}))
    assert table.shares({KEY: 1000.0}, {"me/1": {KEY: None}}, now_ms=0) == {"me/1": {KEY: 500.0}}
    assert table.shares({KEY: 1000.0}, {"me/1": {KEY: 0.0}}, now_ms=0) == {"me/1": {KEY: pytest.approx(50.0)}}


def test_bounds_fall_by_at_most_half_a_window_and_rise_at_once() -> None:
    assert limit_decrease(100.0, 800.0, elapsed_ms=1000, window_ms=1000) == 400.0
    assert limit_decrease(100.0, 800.0, elapsed_ms=2000, window_ms=1000) == 200.0
    assert limit_decrease(100.0, 800.0, elapsed_ms=250, window_ms=1000) == pytest.approx(800.0 / 2 ** 0.25)
    assert limit_decrease(500.0, 800.0, elapsed_ms=1000, window_ms=1000) == 500.0
    assert limit_decrease(900.0, 100.0, elapsed_ms=10, window_ms=1000) == 900.0


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        ShareTable("me", window_ms=0)
    with pytest.raises(ValueError):
        ShareTable("me", window_ms=1000, floor_fraction=1.5)


def test_published_rates_are_smoothed_window_by_window() -> None:
    first = smooth({}, {KEY: 1000.0})
    assert first == {KEY: 1000.0}  # a new quota-id starts at its rate
    assert smooth(first, {KEY: 0.0, OTHER: 5.0}) == {KEY: pytest.approx(700.0), OTHER: 5.0}
