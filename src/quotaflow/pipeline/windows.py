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


def _names(decided: Decided, res: pa.Table, brokers: pa.Array, groups: np.ndarray) -> tuple[list[pa.Array], np.ndarray]:
    """For state rows ``groups``: [broker, quota_type, tag_user, tag_client_id, limit] arrays, in the order of the
    returned index into ``groups`` (rows grouped by manager)."""
    manager, combo = decided.combos.owner(groups)
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
    named = [broker, *(pa.concat_arrays(cols[c]) for c in ("quota_type", "tag_user", "tag_client_id"))]
    return [*named, pc.cast(pa.concat_arrays(cols["limit"]), pa.float64())], idx


def window_table(decided: Decided, res: pa.Table, brokers: pa.Array) -> pa.Table:
    """The window rows of :func:`~.decide.decide_rows` (``windows=True``) named: broker (``brokers[code]``),
    quota type, the quota-id's tags and limit from the resolution table ``res``. Every row is a whole window (the
    rows held every record of their quota-ids), in the order the loop closed them (grouped by quota type)."""
    w = decided.windows
    if w is None or len(w.group) == 0:
        return WINDOW_SCHEMA.empty_table()
    (broker, quota_type, tag_user, tag_client_id, limit), idx = _names(decided, res, brokers, w.group)
    return pa.table(
        [
            broker, quota_type, tag_user, tag_client_id, pa.array(w.window_start_ms[idx], pa.int64()),
            pa.array(w.value_sum[idx], pa.float64()), pa.array(w.rate[idx], pa.float64()), limit,
            pa.array(w.throttle_count[idx], pa.int64()), pa.array(w.throttle_ms_sum[idx], pa.int64()),
        ],
        schema=WINDOW_SCHEMA,
    )  # fmt: skip


def entity_table(decided: Decided, res: pa.Table, brokers: pa.Array, headroom: float) -> pa.Table:
    """Per quota-id (one state row of the loop) with window rows: peak and p99 (``np.percentile``'s linear
    interpolation) of its window rates, share of its windows with a throttle, p99 × ``headroom``, window count.
    A quota-id's windows all come from one run (whole quota-ids), so its entity row is final."""
    w = decided.windows
    if w is None or len(w.group) == 0:
        return ENTITY_SCHEMA.empty_table()
    order = np.lexsort((w.rate, w.group))
    group, rate = w.group[order], w.rate[order]
    starts = np.flatnonzero(np.diff(group, prepend=-1) != 0)
    ends = np.append(starts[1:], len(group))
    count = ends - starts
    pos = 0.99 * (count - 1)
    lo = np.floor(pos).astype(np.int64)
    frac = pos - lo
    a, b = rate[starts + lo], rate[starts + np.minimum(lo + 1, count - 1)]
    diff = b - a
    p99 = np.where(frac >= 0.5, b - diff * (1 - frac), a + diff * frac)  # numpy's _lerp, bit for bit
    share = np.add.reduceat((w.throttle_count[order] > 0).astype(np.float64), starts) / count
    (broker, quota_type, tag_user, tag_client_id, limit), idx = _names(decided, res, brokers, group[starts])
    return pa.table(
        [
            broker, quota_type, tag_user, tag_client_id, limit, pa.array(rate[ends - 1][idx], pa.float64()),
            pa.array(p99[idx], pa.float64()), pa.array(share[idx], pa.float64()),
            pa.array(p99[idx] * headroom, pa.float64()), pa.array(count[idx], pa.int64()),
        ],
        schema=ENTITY_SCHEMA,
    )  # fmt: skip
