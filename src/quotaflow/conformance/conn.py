"""Conformance replay of ``conn`` vectors (mode ``conn``): args ``samples windowSec interBroker|-``.

Parses the input rows into engine events, replays them through
:class:`~quotaflow.engine.conn_acceptor.AcceptorSimulation`, and renders the expected.csv rows and the final
metrics of the trailing comment lines (read once, at the time of the last processed event).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from quotaflow.engine.conn_acceptor import (
    AcceptorSimulation,
    AddListener,
    BrokerRate,
    Connect,
    Event,
    IpRate,
    ListenerRate,
)
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas
from quotaflow.engine.metrics import MetricSample

OUTPUT_COLUMNS = ("process_ms", "accept_delay_ms", "ip_throttle_ms", "result", "accept_time_ms", "close_time_ms")
# The metrics the reference driver prints: the socket-server-metrics group only.
_REPORTED = frozenset(
    {
        "broker-connection-accept-rate",
        "connection-accept-rate",
        "connection-accept-throttle-time",
        "ip-connection-accept-throttle-time",
    }
)


def _opt_int(value: str) -> int | None:
    return None if value == "" else int(value)


def parse_event(row: dict[str, str]) -> Event:
    ts, op, listener, ip, value = (row["timestamp_ms"], row["op"], row["listener"], row["ip"], row["value"])
    t = int(ts)
    if op == "connect":
        return Connect(t, listener, ip)
    if op == "add_listener":
        return AddListener(t, listener, _opt_int(value))
    if op == "listener_rate":
        return ListenerRate(t, listener, _opt_int(value))
    if op == "broker_rate":
        return BrokerRate(t, int(value))
    if op == "ip_rate":
        return IpRate(t, ip or None, _opt_int(value))
    raise ValueError(f"unknown conn op {op!r}")


def format_value(value: float) -> str:
    """≤ 9 decimals without trailing zeros; NaN (an Avg with no events) is empty."""
    if math.isnan(value):
        return ""
    text = f"{value:.9f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def metric_key(sample: MetricSample) -> str:
    tags = ",".join(f"{k}={v}" for k, v in sample.tags if v)
    return f"{sample.name}{{{tags}}}"


def run(name: str, args: list[str], input_path: Path) -> tuple[list[dict[str, str]], dict[str, str] | None]:
    """Replay one vector; return its output rows (expected.csv columns) and the final metrics."""
    samples, window_sec, inter_broker = int(args[0]), int(args[1]), args[2]
    with input_path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    events = [parse_event(r) for r in rows]
    quotas = ConnectionQuotas(
        ConnectionQuotaConfig(
            quota_window_num=samples,
            quota_window_size_seconds=window_sec,
            inter_broker_listener=None if inter_broker == "-" else inter_broker,
        )
    )
    sim = AcceptorSimulation(quotas)
    outcomes = sim.run(events)
    out: list[dict[str, str]] = []
    for row, outcome in zip(rows, outcomes, strict=True):
        rendered = dict(row)
        for col in OUTPUT_COLUMNS:
            rendered[col] = ""
        if outcome is not None:
            close = outcome.close_time_ms
            rendered.update(
                process_ms=str(outcome.process_ms),
                accept_delay_ms=str(outcome.accept_delay_ms),
                ip_throttle_ms=str(outcome.ip_throttle_ms),
                result=outcome.result.value,
                accept_time_ms=str(outcome.accept_time_ms),
                close_time_ms="" if close is None else str(close),
            )
        out.append(rendered)
    if sim.now_ms is None:
        return out, None
    metrics = {
        metric_key(s): format_value(s.value) for s in quotas.metric_samples(sim.now_ms) if s.name in _REPORTED
    }
    return out, dict(sorted(metrics.items()))
