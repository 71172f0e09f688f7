"""Window rows and entity summaries from the decisions' own loop: whole windows, keyed once, the same however the
rows are split; entities follow the window rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from quotaflow.events import REQUESTS_DIR, read_dataset
from quotaflow.pipeline import replay
from quotaflow.pipeline.decide import WindowSettings, decide_rows
from quotaflow.pipeline.resolve import components, load_config
from quotaflow.pipeline.windows import ENTITY_SCHEMA, WINDOW_KEYS, WINDOW_SCHEMA, entity_table, window_table

SORT = [(k, "ascending") for k in WINDOW_KEYS]


@pytest.fixture(scope="module")
def prepared(traffic: Path, quota_store: Path) -> replay.Prepared:
    table = read_dataset(traffic, REQUESTS_DIR, dictionary=True)
    assert table is not None
    return replay.prepare(table, load_config(quota_store))


def _brokers(p: replay.Prepared) -> pa.Array:
    return p.table.column("broker").combine_chunks().dictionary


def test_threads_and_chunks_do_not_change_the_window_rows(prepared: replay.Prepared,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """One thread, two threads (rows split by component) and small chunks (open windows carried between calls)
    close the same windows, bit for bit."""
    p, settings = prepared, WindowSettings()
    one = decide_rows(p.rows, p.pair, p.views, settings, windows=True)
    comp = np.array(components(p.res), dtype=np.int64)
    two = decide_rows(p.rows, p.pair, p.views, settings, threads=2, component=comp, windows=True)
    monkeypatch.setattr("quotaflow.pipeline.decide.CHUNK_ROWS", 997)
    chunked = decide_rows(p.rows, p.pair, p.views, settings, windows=True)
    whole = window_table(one, p.res, _brokers(p)).sort_by(SORT)
    assert whole.num_rows > 0
    for other in (two, chunked):
        assert window_table(other, p.res, _brokers(p)).sort_by(SORT).equals(whole)
        assert all(np.array_equal(a, b) for a, b in zip(other.columns, one.columns, strict=True))


def test_window_rows_are_aligned_keyed_once_and_cover_every_manager(prepared: replay.Prepared) -> None:
    p = prepared
    rows = window_table(replay.decide(p, WindowSettings()), p.res, _brokers(p))
    assert rows.schema == WINDOW_SCHEMA
    starts = rows.column("window_start_ms").to_numpy()
    assert (starts % 1000 == 0).all()
    keys = rows.select(list(WINDOW_KEYS)).to_pylist()
    assert len({tuple(k.values()) for k in keys}) == len(keys)  # one row per window
    assert set(rows.column("quota_type").to_pylist()) == {"request", "produce", "fetch"}
    assert (rows.column("rate").to_numpy() >= 0).all() and (rows.column("throttle_count").to_numpy() >= 0).all()


def test_entities_summarise_each_quota_id_over_its_windows(prepared: replay.Prepared) -> None:
    """Each entity row is its quota-id's window rows summarised (pandas over the window table as the check)."""
    p = prepared
    decided = replay.decide(p, WindowSettings())
    windows = window_table(decided, p.res, _brokers(p)).to_pandas()
    entities = entity_table(decided, p.res, _brokers(p), headroom=1.5)
    assert entities.schema == ENTITY_SCHEMA
    keys = list(WINDOW_KEYS[:-1])
    got = entities.to_pandas().set_index(keys).sort_index()
    g = windows.groupby(keys)
    assert len(got) == g.ngroups > 10
    assert (got["windows"] == g.size().sort_index()).all()
    assert (got["peak_rate"] == g["rate"].max().sort_index()).all()
    p99 = g["rate"].apply(lambda r: float(np.percentile(r.to_numpy(), 99))).sort_index()
    assert (got["p99_rate"] == p99).all()  # np.percentile's arithmetic, bit for bit
    assert np.allclose(got["recommended_quota"], p99 * 1.5)
    share = g["throttle_count"].apply(lambda c: float((c.to_numpy() > 0).mean())).sort_index()
    assert (got["throttled_share"] == share).all() and (share > 0).any()
    limits = g["limit"].first().sort_index()
    assert got["limit"].fillna(-1).equals(limits.fillna(-1))
