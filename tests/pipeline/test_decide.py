"""The batch drivers: batch boundaries do not change decisions; compiled and pure-Python kernels agree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from quotaflow.engine.exempt import is_request_quota_exempt
from quotaflow.events import REQUESTS_DIR, read_dataset
from quotaflow.pipeline import replay
from quotaflow.pipeline.decide import WindowSettings, request_exempt
from quotaflow.pipeline.resolve import load_config


@pytest.fixture(scope="module")
def prepared(traffic: Path, quota_store: Path) -> pa.Table:
    table = read_dataset(traffic, REQUESTS_DIR)
    assert table is not None
    return replay.prepare(table.slice(0, 12_000), load_config(quota_store))


def test_exemptions_match_engine(prepared: pa.Table) -> None:
    got = request_exempt(prepared)
    rows = prepared.select(["api_key", "acks", "is_follower"]).to_pylist()
    want = [is_request_quota_exempt(r["api_key"], acks=r["acks"], follower_fetch=r["is_follower"]) for r in rows]
    assert got.tolist() == want
    assert 0 < got.sum() < len(want)


def test_batch_size_and_compilation_do_not_change_decisions(
    prepared: pa.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = WindowSettings()
    whole = replay.passes(prepared, settings)
    monkeypatch.setattr(replay, "BATCH_ROWS", 997)  # many batches: quota-ids continue across batch boundaries
    small = replay.passes(prepared, settings)
    sub = prepared.slice(0, 3_000)
    plain = replay.passes(sub, settings, compiled=False)
    compiled = replay.passes(sub, settings)
    for col in ("throttle_ms_request", "throttle_ms_produce", "throttle_ms_fetch", "throttle_ms"):
        assert np.array_equal(whole[col].to_numpy(), small[col].to_numpy()), col
        assert np.array_equal(plain[col].to_numpy(), compiled[col].to_numpy()), col
    applied = whole["throttle_ms"].to_numpy()
    assert (applied > 0).any()
    assert np.array_equal(applied, np.maximum.reduce([whole[c].to_numpy() for c in (
        "throttle_ms_request", "throttle_ms_produce", "throttle_ms_fetch")]))  # fmt: skip


def test_read_rates_equals_engine_read_window() -> None:
    from quotaflow.engine.kernel import KernelState, decide_groups, read_window
    from quotaflow.pipeline.decide import read_rates

    rng = np.random.default_rng(3)
    state = KernelState.empty(3, 11)
    ts = np.sort(rng.integers(0, 30_000, 300)).astype(np.int64)
    off = np.array([0, 100, 200, 300], dtype=np.int64)
    ts = np.concatenate([np.sort(ts[off[g] : off[g + 1]]) for g in range(3)])
    decide_groups(off, np.array([1e3, 5e2, np.inf]), ts, rng.uniform(0, 100, 300), np.zeros(300, np.int8),
                  np.zeros(300, np.int64), False, 11, 1000, -1, state)  # fmt: skip
    groups = np.array([0, 1, 2, 0, 2], dtype=np.int64)
    ends = ts[off[1:] - 1]
    now = ends[groups] + np.array([0, 500, 2_000, 60_000, 100], dtype=np.int64)
    settings = WindowSettings()
    want = [read_window(state, int(g), int(t), 11, 1000).rate for g, t in zip(groups, now, strict=True)]
    assert read_rates(state, groups, now, settings).tolist() == want
    assert read_rates(state, groups, now, settings, compiled=False).tolist() == want
    assert want[0] > 0 and want[3] == 0.0  # a live window, and one read after everything expired


def test_window_rounds_decide_exactly_like_the_plain_pass(prepared: pa.Table) -> None:
    """The windows' round-by-round kernel runs give the same throttles as the single-call decision pass."""
    from quotaflow.pipeline.decide import RequestPass

    settings = WindowSettings()
    table = prepared.take(pa.array(replay.group_order(prepared, list(RequestPass.KEYS))))
    plain = RequestPass(settings)(table)
    rounds, stats = RequestPass(settings).windows(table)
    assert stats is not None
    assert np.array_equal(plain, rounds) and (plain > 0).any()
    assert int(stats.throttle_count.sum()) == int((plain > 0).sum())
    assert int(stats.throttle_ms_sum.sum()) == int(plain.sum())
    assert (stats.rate[stats.recorded] >= 0).all() and (stats.rate > 0).any()
