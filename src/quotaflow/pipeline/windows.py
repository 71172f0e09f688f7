"""Per-window usage and per-entity summaries (OUT/windows/, OUT/entities/), from the decisions' own loop.

A window row is one (broker, quota type, quota-id, 1 s aligned window): the value recorded (bytes, or percent of
a thread for the request quota), the engine's windowed rate read right after the window's last row (without the
read's purge mutating state), the limit, and the count and sum of that manager's own throttles. The loop that
decides the rows closes the windows as it goes (:mod:`quotaflow.engine.rows`), so windows cost no second pass.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quotaflow.pipeline.decide import MANAGERS, Decided

WINDOW_KEYS: Final = ("broker", "quota_type", "tag_user", "tag_client_id", "window_start_ms")
WINDOW_SCHEMA: Final = pa.schema(
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
    ]
)
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


def window_table(decided: Decided, res: pa.Table, brokers: pa.Array) -> pa.Table:
    """The window rows of :func:`~.decide.decide_rows` (``windows=True``) named: broker (``brokers[code]``),
    quota type, the quota-id's tags and limit from the resolution table ``res``. Every row is a whole window (the
    rows held every record of their quota-ids), sorted by the window keys."""
    w = decided.windows
    if w is None or len(w.group) == 0:
        return WINDOW_SCHEMA.empty_table()
    manager, combo = decided.combos.owner(w.group)
    pair = pa.array(decided.combos.pair[combo])
    cols: dict[str, list[pa.Array]] = {"quota_type": [], "tag_user": [], "tag_client_id": [], "limit": []}
    order = []
    for m, name in enumerate(MANAGERS):
        rows = np.flatnonzero(manager == m)
        if not len(rows):
            continue
        order.append(rows)
        at = pair.take(pa.array(rows))
        cols["quota_type"].append(pa.array([name] * len(rows), pa.string()))
        for part in ("tag_user", "tag_client_id", "limit"):
            cols[part].append(res.column(f"{name}_{part}").combine_chunks().take(at))
    idx = np.concatenate(order)
    broker = pc.cast(brokers, pa.string()).take(pa.array(decided.combos.broker[combo[idx]]))
    table = pa.table(
        [
            broker, pa.concat_arrays(cols["quota_type"]), pa.concat_arrays(cols["tag_user"]),
            pa.concat_arrays(cols["tag_client_id"]), pa.array(w.window_start_ms[idx], pa.int64()),
            pa.array(w.value_sum[idx], pa.float64()), pa.array(w.rate[idx], pa.float64()),
            pc.cast(pa.concat_arrays(cols["limit"]), pa.float64()), pa.array(w.throttle_count[idx], pa.int64()),
            pa.array(w.throttle_ms_sum[idx], pa.int64()),
        ],
        schema=WINDOW_SCHEMA,
    )  # fmt: skip
    return table.sort_by([(k, "ascending") for k in WINDOW_KEYS])


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
