"""Per-broker connection-acceptor decisions (KIP-612, ``ConnectionQuotas``) driven through the engine's acceptor replay.

The engine's compiled acceptor loop (:mod:`quotaflow.engine.conn_loop`, the array twin of ``AcceptorSimulation``)
replays one broker: its listeners (the
distinct listeners of that broker's events, registered in name order before the first connection, so the
inter-broker listener is protected when there is more than one), the IP quotas of the store (default first), and
every connection in ``(ts_ms, seq)`` order. Shared by the Spark backtest (one call per broker group) and replay.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quotaflow.core.cidr import RangeIndex, is_cidr
from quotaflow.core.keys import INT_MAX
from quotaflow.engine.conn_acceptor import ConnectResult
from quotaflow.engine.conn_loop import RESULT_ACCEPTED, RESULT_IP_THROTTLED, decide_connections
from quotaflow.engine.connection import ConnectionQuotaConfig
from quotaflow.events import CONNECTION_DECISION_FIELDS

DECISION_SCHEMA: Final = pa.schema(list(CONNECTION_DECISION_FIELDS))
_RESULTS: Final = sorted(
    {RESULT_ACCEPTED: ConnectResult.ACCEPTED, RESULT_IP_THROTTLED: ConnectResult.IP_THROTTLED}.items()
)


def decide_broker(table: pa.Table, config: ConnectionQuotaConfig, ip_rates: dict[str | None, int]) -> pa.Table:
    """``table`` holds one broker's connections; returns it sorted by (ts_ms, seq) with the decision columns."""
    table = table.sort_by([("ts_ms", "ascending"), ("seq", "ascending")])
    n = table.num_rows
    if n == 0:
        return _with_decisions(table, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8))
    listeners = pc.dictionary_encode(table.column("listener").combine_chunks())
    ips = pc.dictionary_encode(table.column("client_ip").combine_chunks(), null_encoding="encode")
    names: list[str] = listeners.dictionary.to_pylist()
    rates = {name.lower(): rate for name, rate in config.listener_rates.items()}
    quotas = ip_quotas(ip_rates, ips.dictionary.to_pylist())
    decided = decide_connections(
        table.column("ts_ms").to_numpy(),
        listeners.indices.to_numpy(zero_copy_only=False),
        ips.indices.to_numpy(zero_copy_only=False),
        float(config.max_connection_creation_rate),
        np.array([float(rates.get(name.lower(), INT_MAX)) for name in names], np.float64),
        np.array([name == config.inter_broker_listener and len(names) > 1 for name in names], np.uint8),
        np.array([float(q) for q in quotas], np.float64),
        np.array([q != INT_MAX for q in quotas], np.uint8),
        config.quota_window_num,
        config.quota_window_size_seconds * 1000,
    )
    return _with_decisions(table, decided.accept_delay_ms, decided.ip_throttle_ms, decided.result)


def ip_quotas(ip_rates: dict[str | None, int], ips: list[str | None]) -> list[int]:
    """Each distinct address's connection_creation_rate: its own entity, else the longest CIDR range holding it
    (keys written as ranges), else the default (key None), else unlimited; the engine's rule."""
    default = ip_rates.get(None, INT_MAX)
    exact: dict[str, int] = {}
    ranges: RangeIndex[int] = RangeIndex()
    for key, rate in ip_rates.items():
        if key is not None and is_cidr(key):
            ranges.set(key, rate)
        elif key is not None:
            exact[key] = rate
    return [default if ip is None else ranges.rate_for(ip, exact, default) for ip in ips]


def _with_decisions(table: pa.Table, delay: np.ndarray, ip_ms: np.ndarray, results: np.ndarray) -> pa.Table:
    for name in DECISION_SCHEMA.names:  # decisions already on the input (e.g. the gateway's) are replaced
        if name in table.column_names:
            table = table.drop_columns([name])
    table = table.append_column(DECISION_SCHEMA.field("accept_delay_ms"), pa.array(delay, pa.int64()))
    table = table.append_column(DECISION_SCHEMA.field("ip_throttle_ms"), pa.array(ip_ms, pa.int64()))
    labels = pa.array([r.value for _, r in _RESULTS], pa.string())
    return table.append_column(DECISION_SCHEMA.field("result"), labels.take(pa.array(results, pa.int8())))


def decide_all(table: pa.Table, config: ConnectionQuotaConfig, ip_rates: dict[str | None, int]) -> pa.Table:
    """Every broker of ``table`` in turn (single-process replay)."""
    parts = [
        decide_broker(table.filter(pc.equal(table.column("broker"), b)), config, ip_rates)
        for b in sorted(pc.unique(table.column("broker")).to_pylist())
    ]
    return pa.concat_tables(parts) if parts else table
