"""Per-broker connection decisions (KIP-612 per-IP connection rate) over connection events."""

from __future__ import annotations

import pyarrow as pa

from quotaflow.engine.connection import ConnectionQuotaConfig
from quotaflow.events import CONNECTION_SCHEMA, RESULT_ACCEPTED, RESULT_IP_THROTTLED
from quotaflow.pipeline.connections import DECISION_SCHEMA, decide_all, decide_broker

T0 = 1_700_000_000_000


def _events(broker: str, rows: list[tuple[int, str]], seq0: int = 0) -> pa.Table:
    """Connections at ``T0 + offset`` from ``ip``, on listener PLAINTEXT."""
    return pa.Table.from_pylist(
        [
            {"ts_ms": T0 + dt, "broker": broker, "listener": "PLAINTEXT", "client_ip": ip, "seq": seq0 + i}
            for i, (dt, ip) in enumerate(rows)
        ],
        schema=CONNECTION_SCHEMA,
    )


def _burst(broker: str = "b0") -> pa.Table:
    """100 connections in one second from 10.0.0.1 (quota 5/s) interleaved with 100 from 10.0.0.2 (no quota)."""
    return _events(broker, [(i * 10, ip) for i in range(100) for ip in ("10.0.0.1", "10.0.0.2")])


def test_an_ip_over_its_connection_rate_is_throttled_and_others_are_not() -> None:
    out = decide_broker(_burst(), ConnectionQuotaConfig(), {"10.0.0.1": 5})
    assert out.schema.names[-3:] == DECISION_SCHEMA.names
    rows = out.to_pylist()
    limited = [r for r in rows if r["client_ip"] == "10.0.0.1"]
    free = [r for r in rows if r["client_ip"] == "10.0.0.2"]
    assert {r["result"] for r in free} == {RESULT_ACCEPTED} and all(r["ip_throttle_ms"] == 0 for r in free)
    throttled = [r for r in limited if r["result"] == RESULT_IP_THROTTLED]
    assert throttled and limited[0]["result"] == RESULT_ACCEPTED  # the burst starts under the quota
    assert all(r["ip_throttle_ms"] > 0 for r in throttled)
    assert all(r["ip_throttle_ms"] == 0 for r in limited if r["result"] == RESULT_ACCEPTED)


def test_the_default_ip_quota_applies_to_every_ip_without_its_own() -> None:
    out = decide_broker(_burst(), ConnectionQuotaConfig(), {None: 5, "10.0.0.1": 1_000_000})
    results = {(r["client_ip"], r["result"]) for r in out.to_pylist()}
    assert ("10.0.0.2", RESULT_IP_THROTTLED) in results
    assert ("10.0.0.1", RESULT_IP_THROTTLED) not in results


def test_rows_come_back_in_time_order_with_earlier_decisions_replaced() -> None:
    table = _burst()
    shuffled = table.take(pa.array(list(range(table.num_rows))[::-1]))
    stale = shuffled
    for f in DECISION_SCHEMA:
        stale = stale.append_column(f, pa.nulls(stale.num_rows, f.type))
    want = decide_broker(table, ConnectionQuotaConfig(), {"10.0.0.1": 5})
    got = decide_broker(stale, ConnectionQuotaConfig(), {"10.0.0.1": 5})
    assert got.equals(want)
    assert got.column("seq").to_pylist() == sorted(got.column("seq").to_pylist())


def test_brokers_are_decided_independently() -> None:
    config, rates = ConnectionQuotaConfig(), {"10.0.0.1": 5}
    both = pa.concat_tables([_burst("b1"), _events("b0", [(0, "10.0.0.1")], seq0=1000)])
    out = decide_all(both, config, rates)
    assert out.column("broker").to_pylist() == ["b0"] + ["b1"] * _burst().num_rows
    alone = decide_broker(_burst("b1"), config, rates)
    assert out.slice(1).equals(alone)  # b0's connection does not count against b1's quota
    assert out.column("result")[0].as_py() == RESULT_ACCEPTED


def test_no_connections_no_decisions() -> None:
    out = decide_broker(CONNECTION_SCHEMA.empty_table(), ConnectionQuotaConfig(), {})
    assert out.num_rows == 0 and out.schema.names[-3:] == DECISION_SCHEMA.names
