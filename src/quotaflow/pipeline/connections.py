"""Per-broker connection-acceptor decisions (KIP-612, ``ConnectionQuotas``) driven through the engine's acceptor replay.

The engine's :class:`~quotaflow.engine.conn_acceptor.AcceptorSimulation` replays one broker: its listeners (the
distinct listeners of that broker's events, registered in name order before the first connection, so the
inter-broker listener is protected when there is more than one), the IP quotas of the store (default first), and
every connection in ``(ts_ms, seq)`` order. Shared by the Spark backtest (one call per broker group) and replay.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quotaflow.engine.conn_acceptor import AddListener, Connect, Event, IpRate, simulate
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas
from quotaflow.events import CONNECTION_DECISION_FIELDS

DECISION_SCHEMA: Final = pa.schema(list(CONNECTION_DECISION_FIELDS))


def decide_broker(table: pa.Table, config: ConnectionQuotaConfig, ip_rates: dict[str | None, int]) -> pa.Table:
    """``table`` holds one broker's connections; returns it sorted by (ts_ms, seq) with the decision columns."""
    table = table.sort_by([("ts_ms", "ascending"), ("seq", "ascending")])
    n = table.num_rows
    if n == 0:
        return _with_decisions(table, np.zeros(0, np.int64), np.zeros(0, np.int64), [])
    ts = table.column("ts_ms").to_numpy()
    listeners = table.column("listener").to_pylist()
    ips = table.column("client_ip").to_pylist()
    t0 = int(ts[0])
    events: list[Event] = [AddListener(t0, name) for name in sorted(set(listeners))]
    events += [IpRate(t0, ip, rate) for ip, rate in sorted(ip_rates.items(), key=lambda kv: (kv[0] is not None, kv))]
    first = len(events)
    events += [Connect(int(t), listener, ip) for t, listener, ip in zip(ts.tolist(), listeners, ips, strict=True)]
    outcomes = simulate(ConnectionQuotas(config), events)[first:]
    delay = np.fromiter((o.accept_delay_ms if o else 0 for o in outcomes), dtype=np.int64, count=n)
    ip_ms = np.fromiter((o.ip_throttle_ms if o else 0 for o in outcomes), dtype=np.int64, count=n)
    results = [o.result.value if o else None for o in outcomes]
    return _with_decisions(table, delay, ip_ms, results)


def _with_decisions(table: pa.Table, delay: np.ndarray, ip_ms: np.ndarray, results: list[str | None]) -> pa.Table:
    for name in DECISION_SCHEMA.names:  # decisions already on the input (e.g. the gateway's) are replaced
        if name in table.column_names:
            table = table.drop_columns([name])
    table = table.append_column(DECISION_SCHEMA.field("accept_delay_ms"), pa.array(delay, pa.int64()))
    table = table.append_column(DECISION_SCHEMA.field("ip_throttle_ms"), pa.array(ip_ms, pa.int64()))
    return table.append_column(DECISION_SCHEMA.field("result"), pa.array(results, pa.string()))


def decide_all(table: pa.Table, config: ConnectionQuotaConfig, ip_rates: dict[str | None, int]) -> pa.Table:
    """Every broker of ``table`` in turn (single-process replay)."""
    parts = [
        decide_broker(table.filter(pc.equal(table.column("broker"), b)), config, ip_rates)
        for b in sorted(pc.unique(table.column("broker")).to_pylist())
    ]
    return pa.concat_tables(parts) if parts else table
