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
ENTITY_KEYS: Final = WINDOW_KEYS[:-1]
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
    rows held every record of their quota-ids), in the order the loop closed them."""
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
    return table


def entities_from_windows(windows: pa.Table, headroom: float) -> pa.Table:
    """Per quota-id: peak and p99 (``np.percentile``'s linear interpolation) of the window rates, share of active
    windows with a throttle, p99 × headroom; one sort, then per-group arithmetic on the sorted arrays."""
    if windows.num_rows == 0:
        return ENTITY_SCHEMA.empty_table()
    t = windows.sort_by([(k, "ascending") for k in ENTITY_KEYS] + [("rate", "ascending")])
    n_rows = t.num_rows
    change = np.zeros(n_rows, dtype=bool)
    change[0] = True
    for k in ENTITY_KEYS:
        col = t.column(k).combine_chunks()
        same = pc.fill_null(pc.equal(col.slice(1), col.slice(0, n_rows - 1)), False).to_numpy(zero_copy_only=False)
        both_null = (pc.is_null(col.slice(1)).to_numpy(zero_copy_only=False)
                     & pc.is_null(col.slice(0, n_rows - 1)).to_numpy(zero_copy_only=False))  # fmt: skip
        change[1:] |= ~(same | both_null)
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n_rows)
    count = ends - starts
    rate = t.column("rate").to_numpy()
    pos = 0.99 * (count - 1)
    lo = np.floor(pos).astype(np.int64)
    frac = pos - lo
    a = rate[starts + lo]
    b = rate[starts + np.minimum(lo + 1, count - 1)]
    diff = b - a
    p99 = np.where(frac >= 0.5, b - diff * (1 - frac), a + diff * frac)  # numpy's _lerp, bit for bit
    throttled = (t.column("throttle_count").to_numpy() > 0).astype(np.float64)
    share = np.add.reduceat(throttled, starts) / count
    first = pa.array(starts)
    return pa.table(
        [
            *(t.column(k).take(first) for k in ENTITY_KEYS),
            pc.cast(t.column("limit").take(first), pa.float64()),
            pa.array(rate[ends - 1], pa.float64()),
            pa.array(p99, pa.float64()),
            pa.array(share, pa.float64()),
            pa.array(p99 * headroom, pa.float64()),
            pa.array(count, pa.int64()),
        ],
        schema=ENTITY_SCHEMA,
    )
