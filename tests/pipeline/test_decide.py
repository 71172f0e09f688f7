"""The batch drivers: batch boundaries do not change decisions; compiled and pure-Python kernels agree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from quotaflow.engine.exempt import is_request_quota_exempt
from quotaflow.events import REQUESTS_DIR, read_dataset
from quotaflow.pipeline import replay
from quotaflow.pipeline.decide import BytePass, RequestPass, WindowSettings, request_exempt
from quotaflow.pipeline.resolve import load_config
from quotaflow.pipeline.windows import table_order


@pytest.fixture(scope="module")
def prepared(traffic: Path, quota_store: Path) -> pa.Table:
    """The traffic's good rows with every helper column the batch passes read (as the window pass sees them)."""
    table = read_dataset(traffic, REQUESTS_DIR)
    assert table is not None
    return replay.decide_requests(table.slice(0, 12_000), load_config(quota_store), WindowSettings())


DECISIONS = ("throttle_ms_produce", "throttle_ms_fetch", "throttle_ms_request", "throttle_ms")


def test_exemptions_match_engine(prepared: pa.Table) -> None:
    got = request_exempt(prepared)
    rows = prepared.select(["api_key", "acks", "is_follower"]).to_pylist()
    want = [is_request_quota_exempt(r["api_key"], acks=r["acks"], follower_fetch=r["is_follower"]) for r in rows]
    assert got.tolist() == want
    assert 0 < got.sum() < len(want)


def _batched(prepared: pa.Table, rows: int) -> dict[str, np.ndarray]:
    """The batch drivers (Spark's two-pass strategy): sorted batches of ``rows`` rows, state carried across."""
    settings = WindowSettings()
    n = prepared.num_rows
    req = np.zeros(n, dtype=np.int64)
    order = table_order(prepared, RequestPass.KEYS)
    rp = RequestPass(settings)
    for start in range(0, n, rows):
        idx = order[start : start + rows]
        req[idx] = rp(prepared.take(pa.array(idx)))
    with_req = prepared.set_column(prepared.schema.get_field_index("throttle_ms_request"), "throttle_ms_request",
                                   pa.array(req))  # fmt: skip
    recorded = with_req.filter(pc.not_equal(with_req["byte_type"], 3))
    rec_rows = np.flatnonzero(prepared["byte_type"].to_numpy() != 3)
    order = table_order(recorded, BytePass.KEYS)
    produce, fetch = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    bp = BytePass(settings)
    for start in range(0, len(order), rows):
        idx = order[start : start + rows]
        p, f = bp(recorded.take(pa.array(idx)))
        produce[rec_rows[idx]], fetch[rec_rows[idx]] = p, f
    return {"throttle_ms_request": req, "throttle_ms_produce": produce, "throttle_ms_fetch": fetch}


def test_batch_drivers_equal_the_whole_array_passes(prepared: pa.Table) -> None:
    """Two implementations of the same passes agree: per-batch drivers with carried state (997-row batches cut
    quota-ids everywhere) and the one-call whole-array path used by replay and the Spark UDF."""
    batched = _batched(prepared, 997)
    for col, values in batched.items():
        assert np.array_equal(values, prepared[col].to_numpy()), col
    applied = prepared["throttle_ms"].to_numpy()
    assert (applied > 0).any() and (prepared["throttle_ms_fetch"].to_numpy() > 0).any()
    assert np.array_equal(applied, np.maximum.reduce([batched[c] for c in batched]))


def test_row_order_and_compilation_do_not_change_decisions(traffic: Path, quota_store: Path) -> None:
    """Shuffled rows (a Spark partition arrives unordered) decide the same as time-ordered rows, and the
    pure-Python kernel gives what the compiled one gives."""
    table = read_dataset(traffic, REQUESTS_DIR, dictionary=True)
    assert table is not None
    config = load_config(quota_store)
    settings = WindowSettings()
    want = replay.decide(replay.prepare(table, config), settings)
    perm = np.random.default_rng(5).permutation(table.num_rows)
    shuffled = replay.decide(replay.prepare(table.take(pa.array(perm)), config), settings)
    sub = replay.prepare(table.slice(0, 3_000), config)
    plain, compiled = replay.decide(sub, settings, compiled=False), replay.decide(sub, settings)
    for col in DECISIONS:
        assert np.array_equal(shuffled[col].to_numpy(), want[col].to_numpy()[perm]), col
        assert np.array_equal(plain[col].to_numpy(), compiled[col].to_numpy()), col
    assert (want["throttle_ms"].to_numpy() > 0).any()


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
    settings = WindowSettings()
    table = prepared.take(pa.array(table_order(prepared, RequestPass.KEYS)))
    plain = RequestPass(settings)(table)
    rounds, stats = RequestPass(settings).windows(table)
    assert stats is not None
    assert np.array_equal(plain, rounds) and (plain > 0).any()
    assert int(stats.throttle_count.sum()) == int((plain > 0).sum())
    assert int(stats.throttle_ms_sum.sum()) == int(plain.sum())
    assert (stats.rate[stats.recorded] >= 0).all() and (stats.rate > 0).any()


def test_state_rows_follow_the_quota_ids_present_not_brokers_times_quota_ids() -> None:
    """Kernel state is one row per (manager, broker, quota-id) the rows use: a high broker code and a wide quota-id
    range do not allocate brokers × quota-ids rows."""
    from quotaflow.pipeline.decide import Combos, ManagerView

    qid = np.array([0, 4_999, 4_999, 7], dtype=np.int64)  # pairs 1 and 2 share a quota-id
    view = ManagerView(qid, np.full(4, 100.0), np.ones(4, dtype=bool))
    views = {"request": view, "produce": view, "fetch": view}
    broker = np.array([900, 900, 900, 3, 3], dtype=np.int64)
    pair = np.array([0, 1, 2, 2, 3], dtype=np.int64)
    combos = Combos.of(broker, pair, views)
    assert combos.groups == 3 * 4  # (900, 0), (900, 4999), (3, 4999), (3, 7) per manager
    g = combos.group[1][combos.combo]
    assert g[1] == g[2] and g[2] != g[3] and len(set(g.tolist())) == 4
