"""Per-window usage and per-entity summaries (OUT/windows/, OUT/entities/), from the same kernel runs.

A window row is one (broker, quota type, quota-id, 1 s aligned window): the value recorded (bytes, or percent of
a thread for the request quota), the engine's windowed rate read right after the window's last record, the limit,
and the count and sum of that manager's own throttles. Batches may cut a window in two; partial rows carry the
time of their last record and :func:`merge_partials` (or the Spark equivalent) combines them.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quotaflow.pipeline.decide import (
    I64,
    BytePass,
    RequestPass,
    WindowSettings,
    WindowStats,
    codes,
    group_offsets,
    group_order,
    time_order,
)

WINDOW_KEYS: Final = ("broker", "quota_type", "tag_user", "tag_client_id", "window_start_ms")
PARTIAL_SCHEMA: Final = pa.schema(
    [
        pa.field("broker", pa.string()),
        pa.field("quota_type", pa.string()),
        pa.field("tag_user", pa.string()),
        pa.field("tag_client_id", pa.string()),
        pa.field("window_start_ms", pa.int64()),
        pa.field("value_sum", pa.float64()),
        pa.field("rate", pa.float64()),
        pa.field("limit", pa.float64()),
        pa.field("throttle_count", pa.int64()),
        pa.field("throttle_ms_sum", pa.int64()),
        pa.field("last_ts_ms", pa.int64()),
    ]
)
WINDOW_SCHEMA: Final = pa.schema([f for f in PARTIAL_SCHEMA if f.name != "last_ts_ms"])
ENTITY_SCHEMA: Final = pa.schema(
    [
        pa.field("broker", pa.string()),
        pa.field("quota_type", pa.string()),
        pa.field("tag_user", pa.string()),
        pa.field("tag_client_id", pa.string()),
        pa.field("limit", pa.float64()),
        pa.field("peak_rate", pa.float64()),
        pa.field("p99_rate", pa.float64()),
        pa.field("throttled_share", pa.float64()),
        pa.field("recommended_quota", pa.float64()),
        pa.field("windows", pa.int64()),
    ]
)
WINDOW_INPUTS: Final = (
    "broker", "ts_ms", "seq", "api_key", "acks", "is_follower", "io_thread_ns", "network_thread_ns", "request_bytes",
    "response_bytes", "throttle_ms_request", "request_qid", "request_limit", "request_enabled", "request_tag_user",
    "request_tag_client_id", "byte_type", "byte_qid", "byte_limit", "byte_enabled", "byte_tag_user",
    "byte_tag_client_id",
)  # fmt: skip
"""The columns the window passes read: everything else stays behind (takes, shuffles and Arrow transfers)."""
TAG_COLUMNS: Final = {
    "request": ("request_tag_user", "request_tag_client_id"),
    "produce": ("byte_tag_user", "byte_tag_client_id"),
    "fetch": ("byte_tag_user", "byte_tag_client_id"),
}


def _partial(
    batch: pa.RecordBatch | pa.Table, quota_type: str, keys: tuple[str, ...], stats: WindowStats, limit_col: str
) -> pa.Table:
    """Window rows of one batch: the stats' group g is the g-th run of ``keys`` in ``batch``."""
    first = group_offsets([batch.column(k) for k in keys])[:-1]
    keep = stats.recorded
    rows = pa.array(first[stats.group[keep]])
    tu, tc = TAG_COLUMNS[quota_type]
    def text(name: str) -> pa.Array:  # dictionary-encoded in replay, plain in Spark
        return pc.cast(batch.column(name).take(rows), pa.string())

    return pa.table(
        [
            text("broker"),
            pa.array([quota_type] * len(rows), pa.string()),
            text(tu),
            text(tc),
            pa.array(stats.window_start_ms[keep], pa.int64()),
            pa.array(stats.value_sum[keep], pa.float64()),
            pa.array(stats.rate[keep], pa.float64()),
            batch.column(limit_col).take(rows),
            pa.array(stats.throttle_count[keep], pa.int64()),
            pa.array(stats.throttle_ms_sum[keep], pa.int64()),
            pa.array(stats.last_ts_ms[keep], pa.int64()),
        ],
        schema=PARTIAL_SCHEMA,
    )


class RequestWindows:
    """Window rows of the request quota over batches sorted like the request pass."""

    def __init__(self, settings: WindowSettings) -> None:
        self.pass_ = RequestPass(settings)

    def __call__(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        _, stats = self.pass_.windows(batch)
        if stats is None:
            return PARTIAL_SCHEMA.empty_table()
        return _partial(batch, "request", RequestPass.KEYS, stats, "request_limit")


class ByteWindows:
    """Window rows of the produce and fetch quotas over batches sorted like the byte pass."""

    def __init__(self, settings: WindowSettings) -> None:
        self.pass_ = BytePass(settings)

    def __call__(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        parts = [
            _partial(batch.take(pa.array(rows)), name, BytePass.KEYS, stats, "byte_limit")
            for name, rows, _, stats in self.pass_.windows(batch)
        ]
        return pa.concat_tables(parts) if parts else PARTIAL_SCHEMA.empty_table()


def merge_partials(partials: pa.Table) -> pa.Table:
    """Combine rows of the same window cut by batch boundaries: sums add, the rate is the later reading."""
    if partials.num_rows == 0:
        return WINDOW_SCHEMA.empty_table()
    t = partials.sort_by([(k, "ascending") for k in WINDOW_KEYS] + [("last_ts_ms", "ascending")])
    agg = t.group_by(list(WINDOW_KEYS), use_threads=False).aggregate(
        [("value_sum", "sum"), ("rate", "last"), ("limit", "first"), ("throttle_count", "sum"),
         ("throttle_ms_sum", "sum")]
    )  # fmt: skip
    agg = agg.rename_columns([*WINDOW_KEYS, "value_sum", "rate", "limit", "throttle_count", "throttle_ms_sum"])
    return agg.select(WINDOW_SCHEMA.names).cast(WINDOW_SCHEMA).sort_by([(k, "ascending") for k in WINDOW_KEYS])


def table_order(table: pa.Table, keys: tuple[str, ...]) -> I64:
    """Row order grouping ``table`` by ``keys`` (any column types), each group in (ts_ms, seq) order."""
    combined = np.zeros(table.num_rows, dtype=np.int64)
    for k in keys:
        code, values = codes(table.column(k))
        combined = combined * max(len(values), 1) + code
    ts, seq = (table.column(c).to_numpy().astype(np.int64) for c in ("ts_ms", "seq"))
    return group_order(combined, time_order(ts, seq))


def window_rows(decided: pa.Table, settings: WindowSettings, batch_rows: int = 1 << 20) -> pa.Table:
    """All window rows of a decided request table (helper and tag columns attached), single process."""
    decided = decided.select([c for c in WINDOW_INPUTS if c in decided.column_names])
    parts = []
    for keys, windows in ((RequestPass.KEYS, RequestWindows(settings)), (BytePass.KEYS, ByteWindows(settings))):
        table = decided if keys == RequestPass.KEYS else decided.filter(pc.not_equal(decided["byte_type"], 3))
        ordered = table.take(pa.array(table_order(table, keys)))
        parts += [windows(ordered.slice(s, batch_rows)) for s in range(0, ordered.num_rows, batch_rows)]
    return merge_partials(pa.concat_tables(parts) if parts else PARTIAL_SCHEMA.empty_table())


def entities_from_windows(windows: pa.Table, headroom: float) -> pa.Table:
    """Per quota-id: peak and p99 of the window rates, share of active windows with a throttle, p99 × headroom."""
    keys = ["broker", "quota_type", "tag_user", "tag_client_id"]
    if windows.num_rows == 0:
        return ENTITY_SCHEMA.empty_table()
    df = windows.to_pandas()
    g = df.groupby(keys, sort=True)
    out = g.agg(
        limit=("limit", "first"),
        peak_rate=("rate", "max"),
        p99_rate=("rate", lambda r: float(np.percentile(r.to_numpy(), 99))),
        throttled_share=("throttle_count", lambda c: float((c.to_numpy() > 0).mean())),
        windows=("rate", "size"),
    ).reset_index()
    out["recommended_quota"] = out["p99_rate"] * headroom
    return pa.Table.from_pandas(out[ENTITY_SCHEMA.names], schema=ENTITY_SCHEMA, preserve_index=False)
