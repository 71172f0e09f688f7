"""Window rows and entity summaries: batch cuts merge back into whole windows, summaries follow the window rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from quotaflow.events import REQUESTS_DIR, read_dataset
from quotaflow.pipeline import replay
from quotaflow.pipeline.decide import WindowSettings
from quotaflow.pipeline.resolve import load_config
from quotaflow.pipeline.windows import (
    ENTITY_SCHEMA,
    PARTIAL_SCHEMA,
    WINDOW_KEYS,
    WINDOW_SCHEMA,
    entities_from_windows,
    merge_partials,
    window_rows,
)


def _partials(rows: list[tuple[object, ...]], schema: pa.Schema = PARTIAL_SCHEMA) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)


def test_merge_partials_adds_sums_and_keeps_the_later_rate() -> None:
    """A window cut by a batch boundary: its halves' sums add, the rate read after the later half wins."""
    later = ("b0", "produce", "u", "c", 1000, 300.0, 90.0, 100.0, 1, 40, 1900)
    earlier = ("b0", "produce", "u", "c", 1000, 200.0, 50.0, 100.0, 2, 10, 1400)
    other = ("b0", "fetch", "u", "c", 1000, 7.0, 7.0, 5.0, 0, 0, 1100)
    merged = merge_partials(_partials([later, other, earlier]))
    assert merged.schema == WINDOW_SCHEMA
    assert merged.to_pylist() == [
        dict(zip(WINDOW_SCHEMA.names, ("b0", "fetch", "u", "c", 1000, 7.0, 7.0, 5.0, 0, 0), strict=True)),
        dict(zip(WINDOW_SCHEMA.names, ("b0", "produce", "u", "c", 1000, 500.0, 90.0, 100.0, 3, 50), strict=True)),
    ]
    assert merge_partials(PARTIAL_SCHEMA.empty_table()).schema == WINDOW_SCHEMA


def test_entities_summarise_each_quota_id_over_its_windows() -> None:
    rates = [10.0, 20.0, 30.0, 40.0]
    rows = [("b0", "request", "u", "c", 1000 * i, 1.0, r, 35.0, int(r > 35), 0) for i, r in enumerate(rates)]
    rows.append(("b0", "request", "v", "c", 0, 1.0, 5.0, 35.0, 0, 0))
    out = entities_from_windows(_partials(rows, WINDOW_SCHEMA), headroom=1.5)
    assert out.schema == ENTITY_SCHEMA
    u, v = out.to_pylist()
    p99 = float(np.percentile(rates, 99))
    assert (u["tag_user"], u["peak_rate"], u["windows"], u["limit"]) == ("u", 40.0, 4, 35.0)
    assert u["p99_rate"] == pytest.approx(p99) and u["recommended_quota"] == pytest.approx(p99 * 1.5)
    assert u["throttled_share"] == 0.25
    assert (v["tag_user"], v["peak_rate"], v["throttled_share"], v["windows"]) == ("v", 5.0, 0.0, 1)
    assert entities_from_windows(WINDOW_SCHEMA.empty_table(), 1.2).schema == ENTITY_SCHEMA


@pytest.fixture(scope="module")
def decided(traffic: Path, quota_store: Path) -> pa.Table:
    table = read_dataset(traffic, REQUESTS_DIR)
    assert table is not None
    return replay.decide_requests(table.slice(0, 12_000), load_config(quota_store), WindowSettings())


def test_batch_boundaries_do_not_change_the_window_rows(decided: pa.Table) -> None:
    whole = window_rows(decided, WindowSettings())
    assert whole.num_rows > 0
    cut = window_rows(decided, WindowSettings(), batch_rows=997)
    exact = [c for c in WINDOW_SCHEMA.names if c != "value_sum"]
    assert cut.select(exact).equals(whole.select(exact))  # the engine's rate and throttles: bit for bit
    # request-time percents are summed per batch and then across batches: the same sum, another addition order
    assert cut.column("value_sum").to_numpy() == pytest.approx(whole.column("value_sum").to_numpy(), rel=1e-12)


def test_window_rows_are_aligned_keyed_once_and_cover_every_manager(decided: pa.Table) -> None:
    rows = window_rows(decided, WindowSettings())
    assert rows.schema == WINDOW_SCHEMA
    starts = rows.column("window_start_ms").to_numpy()
    assert (starts % 1000 == 0).all()
    keys = rows.select(list(WINDOW_KEYS)).to_pylist()
    assert len({tuple(k.values()) for k in keys}) == len(keys)  # one row per window
    assert set(rows.column("quota_type").to_pylist()) == {"request", "produce", "fetch"}
    assert (rows.column("rate").to_numpy() >= 0).all() and (rows.column("throttle_count").to_numpy() >= 0).all()
