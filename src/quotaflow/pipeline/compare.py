"""``--compare OTHER_STORE``: the same events under two quota configs, throttling side by side per quota-id."""

from __future__ import annotations

from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

ENTITY_KEYS: Final = ["broker", "quota_type", "tag_user", "tag_client_id"]
COMPARE_SCHEMA: Final = pa.schema(
    [
        pa.field("broker", pa.string()),
        pa.field("quota_type", pa.string()),
        pa.field("tag_user", pa.string()),
        pa.field("tag_client_id", pa.string()),
        pa.field("limit_a", pa.float64()),
        pa.field("limit_b", pa.float64()),
        pa.field("throttle_count_a", pa.int64()),
        pa.field("throttle_count_b", pa.int64()),
        pa.field("throttle_ms_a", pa.int64()),
        pa.field("throttle_ms_b", pa.int64()),
        pa.field("throttle_count_delta", pa.int64()),
        pa.field("throttle_ms_delta", pa.int64()),
    ]
)
SUMMARY_SCHEMA: Final = pa.schema(
    [
        pa.field("entities", pa.int64()),
        pa.field("entities_changed", pa.int64()),
        pa.field("throttle_count_a", pa.int64()),
        pa.field("throttle_count_b", pa.int64()),
        pa.field("throttle_ms_a", pa.int64()),
        pa.field("throttle_ms_b", pa.int64()),
    ]
)


def _per_entity(windows: pa.Table, suffix: str) -> pa.Table:
    agg = windows.group_by(ENTITY_KEYS, use_threads=False).aggregate(
        [("limit", "first"), ("throttle_count", "sum"), ("throttle_ms_sum", "sum")]
    )
    return agg.rename_columns([*ENTITY_KEYS, f"limit_{suffix}", f"throttle_count_{suffix}", f"throttle_ms_{suffix}"])


def compare_windows(a: pa.Table, b: pa.Table) -> pa.Table:
    """Per (broker, quota type, quota-id): throttle counts and ms under config A (the store) and B (--compare).

    A quota-id present under one config only (tags can move when quotas change) gets zeros on the other side."""
    joined = _per_entity(a, "a").join(_per_entity(b, "b"), keys=ENTITY_KEYS, join_type="full outer")
    cols = {name: joined.column(name) for name in ENTITY_KEYS}
    for side in ("a", "b"):
        cols[f"limit_{side}"] = joined.column(f"limit_{side}")
    for side in ("a", "b"):
        for m in ("throttle_count", "throttle_ms"):
            cols[f"{m}_{side}"] = pc.fill_null(joined.column(f"{m}_{side}"), 0)
    out = pa.table(
        {
            **cols,
            "throttle_count_delta": pc.subtract(cols["throttle_count_b"], cols["throttle_count_a"]),
            "throttle_ms_delta": pc.subtract(cols["throttle_ms_b"], cols["throttle_ms_a"]),
        }
    )
    return out.select(COMPARE_SCHEMA.names).cast(COMPARE_SCHEMA).sort_by([(k, "ascending") for k in ENTITY_KEYS])


def compare_summary(compare: pa.Table) -> pa.Table:
    """One row: how many quota-ids, how many changed, and the total throttle counts and ms on each side."""
    changed = pc.or_(pc.not_equal(compare["throttle_count_delta"], 0), pc.not_equal(compare["throttle_ms_delta"], 0))
    row = {
        "entities": [compare.num_rows],
        "entities_changed": [int(pc.sum(pc.cast(changed, pa.int64())).as_py() or 0)],
        **{c: [int(pc.sum(compare[c]).as_py() or 0)] for c in SUMMARY_SCHEMA.names[2:]},
    }
    return pa.table(row, schema=SUMMARY_SCHEMA)
