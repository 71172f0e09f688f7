"""The compiled connection loop == its pure-Python twin == the object-model acceptor replay, on random traces."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from quotaflow.core.keys import INT_MAX
from quotaflow.engine.conn_acceptor import AddListener, Connect, Event, IpRate, simulate
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas
from quotaflow.pipeline.connections import decide_broker


def _reference(table: pa.Table, config: ConnectionQuotaConfig, ip_rates: dict[str | None, int]) -> list[tuple]:
    """What the pipeline decided before the loop: AcceptorSimulation over ConnectionQuotas."""
    table = table.sort_by([("ts_ms", "ascending"), ("seq", "ascending")])
    ts = table.column("ts_ms").to_pylist()
    listeners = table.column("listener").to_pylist()
    ips = table.column("client_ip").to_pylist()
    t0 = ts[0]
    events: list[Event] = [AddListener(t0, name) for name in sorted(set(listeners))]
    events += [IpRate(t0, ip, r) for ip, r in sorted(ip_rates.items(), key=lambda kv: (kv[0] is not None, kv))]
    first = len(events)
    events += [Connect(t, lst, ip) for t, lst, ip in zip(ts, listeners, ips, strict=True)]
    out = simulate(ConnectionQuotas(config), events)[first:]
    return [(o.accept_delay_ms, o.ip_throttle_ms, o.result.value) for o in out if o is not None]


def _trace(rng: random.Random, n: int) -> tuple[pa.Table, ConnectionQuotaConfig, dict[str | None, int]]:
    listeners = ["PLAINTEXT", "SSL", "internal"][: rng.randint(1, 3)]
    ips = [f"10.0.0.{i}" for i in range(rng.randint(1, 6))] + ([None] if rng.random() < 0.3 else [])
    t, rows = 1_000_000, []
    for seq in range(n):
        gap = rng.choice([0, 0, 1, 3, 10, 50, 400, 2000, 20_000, 3_700_000 if rng.random() < 0.02 else 5])
        t += gap
        rows.append((t, seq, rng.choice(listeners), rng.choice(ips)))
    rng.shuffle(rows)
    table = pa.table({"ts_ms": [r[0] for r in rows], "seq": [r[1] for r in rows],
                      "listener": [r[2] for r in rows], "client_ip": pa.array([r[3] for r in rows], pa.string())})
    config = ConnectionQuotaConfig(
        quota_window_num=rng.choice([2, 11]),
        quota_window_size_seconds=rng.choice([1, 2]),
        max_connection_creation_rate=rng.choice([INT_MAX, 5, 20, 100]),
        listener_rates={name.lower(): rng.choice([1, 4, 30]) for name in listeners if rng.random() < 0.5},
        inter_broker_listener=rng.choice([None, listeners[0]]),
    )
    ip_rates: dict[str | None, int] = {ip: rng.choice([1, 2, 10]) for ip in ips if ip and rng.random() < 0.5}
    if rng.random() < 0.6:
        ip_rates[None] = rng.choice([3, 8, INT_MAX])
    return table, config, ip_rates


@pytest.mark.parametrize("seed", range(30))
def test_loop_matches_acceptor_simulation(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    table, config, ip_rates = _trace(random.Random(seed), 400)
    expected = _reference(table, config, ip_rates)
    compiled = decide_broker(table, config, ip_rates)
    import quotaflow.engine.conn_loop as conn_loop

    monkeypatch.setattr(conn_loop, "HAVE_NUMBA", False)
    pure = decide_broker(table, config, ip_rates)
    assert compiled.equals(pure)
    got = list(zip(compiled.column("accept_delay_ms").to_pylist(), compiled.column("ip_throttle_ms").to_pylist(),
                   compiled.column("result").to_pylist(), strict=True))
    assert got == expected


def test_traces_exercise_both_throttles() -> None:
    """The random traces above really do produce acceptor delays and IP throttles (the comparison is not vacuous)."""
    delays = throttles = 0
    for seed in range(30):
        table, config, ip_rates = _trace(random.Random(seed), 400)
        out = decide_broker(table, config, ip_rates)
        delays += int(np.count_nonzero(out.column("accept_delay_ms").to_numpy()))
        throttles += out.column("result").to_pylist().count("IP_THROTTLED")
    assert delays > 100 and throttles > 100
