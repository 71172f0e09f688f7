"""The acceptor replay API the conformance runner and the pipeline's backtests share."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from quotaflow.engine.conn_acceptor import (
    AcceptorSimulation,
    AddListener,
    BrokerRate,
    Connect,
    ConnectOutcome,
    ConnectResult,
    Event,
    IpRate,
    ListenerRate,
    simulate,
)
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas

T0 = 1_000_000


def quotas() -> ConnectionQuotas:
    return ConnectionQuotas(ConnectionQuotaConfig(quota_window_num=2, inter_broker_listener="REPLICATION"))


def test_broker_delay_queues_fifo_and_inter_broker_is_exempt() -> None:
    events = [
        AddListener(T0, "EXTERNAL"),
        AddListener(T0, "REPLICATION"),
        BrokerRate(T0, 1),
        Connect(T0, "EXTERNAL", "10.0.0.1"),
        Connect(T0 + 10, "EXTERNAL", "10.0.0.2"),
        Connect(T0 + 20, "EXTERNAL", "10.0.0.3"),
        Connect(T0 + 5, "REPLICATION", "10.0.0.9"),  # out of row order: listeners interleave by time
    ]
    out = simulate(quotas(), events)
    assert out[:3] == [None, None, None]
    first, second, third, repl = out[3:]
    assert first is not None and (first.process_ms, first.accept_delay_ms) == (T0, 0)
    # the 2nd: 2 in a 1010 ms window vs 1/s -> (2/1.01 - 1) * 1010 = 990 ms acceptor delay; the 3rd waits
    assert second is not None and (second.process_ms, second.accept_delay_ms) == (T0 + 10, 990)
    assert third is not None and third.process_ms == second.accept_time_ms == T0 + 1000
    assert repl is not None and (repl.process_ms, repl.accept_delay_ms, repl.accept_time_ms) == (T0 + 5, 0, T0 + 5)
    assert all(o is not None and o.result is ConnectResult.ACCEPTED and o.close_time_ms is None for o in out[3:])


def test_ip_throttle_outcome_and_batches_carry_state() -> None:
    sim = AcceptorSimulation(quotas())
    sim.run([AddListener(T0, "EXTERNAL"), IpRate(T0, "10.0.0.1", 1)])
    (a,) = sim.run([Connect(T0, "EXTERNAL", "10.0.0.1")])
    (b,) = sim.run([Connect(T0 + 100, "EXTERNAL", "10.0.0.1")])  # the rate remembers the first batch
    assert a is not None and a.result is ConnectResult.ACCEPTED
    assert b is not None and b.result is ConnectResult.IP_THROTTLED
    assert b.ip_throttle_ms == 900 and b.close_time_ms == T0 + 1000  # (2/1.1 - 1) * 1100
    assert sim.now_ms == T0 + 100


def test_acceptor_free_time_carries_across_batches() -> None:
    sim = AcceptorSimulation(quotas())
    sim.run([AddListener(T0, "EXTERNAL"), BrokerRate(T0, 1)])
    sim.run([Connect(T0, "EXTERNAL", "a"), Connect(T0, "EXTERNAL", "b")])
    (c,) = sim.run([Connect(T0 + 1, "EXTERNAL", "c")])
    assert c is not None and c.process_ms == T0 + 1000  # waits for the acceptor blocked by the previous batch


@st.composite
def workloads(draw: st.DrawFn) -> tuple[int, int | None, dict[str, int], list[Connect]]:
    broker = draw(st.sampled_from([1, 5, 50, 2147483647]))
    listener_rate = draw(st.sampled_from([None, 2, 20]))
    ip_rates = draw(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(1, 10), max_size=2))
    gaps = draw(st.lists(st.integers(0, 400), min_size=1, max_size=60))
    connects, t = [], T0
    for gap in gaps:
        t += gap
        listener = draw(st.sampled_from(["EXTERNAL", "REPLICATION"]))
        connects.append(Connect(t, listener, draw(st.sampled_from(["a", "b", "c", "d"]))))
    return broker, listener_rate, ip_rates, connects


@settings(max_examples=150, deadline=None)
@given(workloads())
def test_replay_invariants(workload: tuple[int, int | None, dict[str, int], list[Connect]]) -> None:
    broker, listener_rate, ip_rates, connects = workload
    events: list[Event] = [AddListener(T0, "EXTERNAL", listener_rate), AddListener(T0, "REPLICATION"),
                           BrokerRate(T0, broker)]
    events += [IpRate(T0, ip, rate) for ip, rate in ip_rates.items()]
    first = len(events)
    out = simulate(quotas(), events + list(connects))[first:]
    free_at: dict[str, int] = {}
    for c, o in zip(connects, out, strict=True):
        assert o is not None
        assert o.process_ms >= max(c.ts_ms, free_at.get(c.listener, c.ts_ms))  # FIFO, one acceptor per listener
        assert 0 <= o.accept_delay_ms <= 1000 and 0 <= o.ip_throttle_ms <= 1000  # bounded by one window
        assert o.accept_time_ms == o.process_ms + o.accept_delay_ms
        free_at[c.listener] = o.accept_time_ms
        if c.listener == "REPLICATION":
            assert o.accept_delay_ms == 0  # protected from the broker rate, no listener rate of its own
        if c.ip not in ip_rates:
            assert o.result is ConnectResult.ACCEPTED
        else:
            assert (o.result is ConnectResult.IP_THROTTLED) == (o.ip_throttle_ms > 0)


# Deterministic replays of ConnectionQuotasTest's wall-clock cases (TEST-CASES §6), with their tolerances.
LISTENERS = ("EXTERNAL", "ADMIN", "REPLICATION")


def replay_listeners(config: list[Event], per_listener: int, every_ms: int) -> dict[str, list[ConnectOutcome]]:
    events: list[Event] = [AddListener(T0, name) for name in LISTENERS] + config
    first = len(events)
    connects = [Connect(T0 + i * every_ms, name, f"10.0.0.{j}") for i in range(per_listener)
                for j, name in enumerate(LISTENERS)]
    outcomes = simulate(quotas(), events + connects)[first:]
    by: dict[str, list[ConnectOutcome]] = {name: [] for name in LISTENERS}
    for c, o in zip(connects, outcomes, strict=True):
        assert o is not None
        by[c.listener].append(o)
    return by


def accept_rate(outcomes: list[ConnectOutcome]) -> float:
    return len(outcomes) / ((outcomes[-1].accept_time_ms - T0) / 1000)


def test_broker_rate_below_limit_never_blocks() -> None:
    by = replay_listeners([BrokerRate(T0, 125)], per_listener=200, every_ms=25)  # 3 x 40/s
    assert all(o.accept_delay_ms == 0 for outs in by.values() for o in outs)


def test_broker_rate_above_limit_blocks_all_but_inter_broker() -> None:
    by = replay_listeners([BrokerRate(T0, 90)], per_listener=300, every_ms=10)  # 3 x 100/s
    assert any(o.accept_delay_ms > 0 for o in by["EXTERNAL"])
    assert any(o.accept_delay_ms > 0 for o in by["ADMIN"])
    assert all(o.accept_delay_ms == 0 for o in by["REPLICATION"])


def test_listener_rate_above_limit_holds_every_listener_to_30_within_7() -> None:
    config: list[Event] = [ListenerRate(T0, name, 30) for name in LISTENERS]
    by = replay_listeners(config, per_listener=600, every_ms=25)  # 40/s each
    for name in LISTENERS:
        assert 23 <= accept_rate(by[name]) <= 37, name


def test_listener_rate_reconfiguration_takes_effect() -> None:
    events: list[Event] = [AddListener(T0, "EXTERNAL", 10)]
    events += [Connect(T0 + i * 5, "EXTERNAL", "10.0.0.1") for i in range(200)]  # 200/s offered
    outs = [o for o in simulate(quotas(), events) if o is not None]
    assert 7 <= accept_rate(outs) <= 13  # Kafka: 10 +- 3
