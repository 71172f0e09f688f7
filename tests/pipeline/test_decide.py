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
from quotaflow.pipeline.decide import BytePass, RequestPass, WindowSettings, byte_types, request_exempt
from quotaflow.pipeline.resolve import TYPE_CODE, load_config
from quotaflow.pipeline.windows import WINDOW_KEYS


@pytest.fixture(scope="module")
def prepared(traffic: Path, quota_store: Path) -> pa.Table:
    """The traffic's rows with their decisions (wide) and the helper columns the batch passes read."""
    table = read_dataset(traffic, REQUESTS_DIR)
    assert table is not None
    p = replay.prepare(table.slice(0, 12_000), load_config(quota_store))
    decided = replay.decision_table(p, replay.decide(p, WindowSettings(), windows=False), with_inputs=True)
    for name, col in helper_columns(p).items():
        decided = decided.append_column(name, col)
    return decided


def helper_columns(p: replay.Prepared) -> dict[str, pa.Array]:
    """Per row, what the batch passes read: quota-ids, limits and flags of the request and byte managers."""
    bt = byte_types(p.rows.api_key, p.rows.is_follower)
    fetch = bt == TYPE_CODE["fetch"]
    request_idx = pa.array(p.pair.astype(np.int32))
    byte_idx = pa.array(p.pair.astype(np.int32) + fetch.astype(np.int32) * p.res.num_rows)  # fetch rows: 2nd half
    cols: dict[str, pa.Array] = {"byte_type": pa.array(bt, pa.int8())}
    for part in ("qid", "limit", "enabled"):
        cols[f"request_{part}"] = p.res.column(f"request_{part}").combine_chunks().take(request_idx)
        both = pa.concat_arrays([p.res.column(f"{t}_{part}").combine_chunks() for t in ("produce", "fetch")])
        cols[f"byte_{part}"] = both.take(byte_idx)
    return cols


def table_order(table: pa.Table, keys: tuple[str, ...]) -> np.ndarray:
    """Rows grouped by ``keys``, each group in (ts_ms, seq) order."""
    return np.lexsort([table[c].to_numpy() for c in ("seq", "ts_ms", *reversed(keys))])


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
    want, want_w = replay.decisions(table, config, settings)
    perm = np.random.default_rng(5).permutation(table.num_rows)
    shuffled, shuffled_w = replay.decisions(table.take(pa.array(perm)), config, settings)
    sub = table.slice(0, 3_000)
    (plain, plain_w), (compiled, compiled_w) = (replay.decisions(sub, config, settings, compiled=False),
                                                replay.decisions(sub, config, settings))  # fmt: skip
    for col in DECISIONS:
        assert np.array_equal(shuffled[col].to_numpy(), want[col].to_numpy()[perm]), col
        assert np.array_equal(plain[col].to_numpy(), compiled[col].to_numpy()), col
    assert (want["throttle_ms"].to_numpy() > 0).any()
    assert shuffled_w is not None and want_w is not None and plain_w is not None and compiled_w is not None
    keys = [(k, "ascending") for k in WINDOW_KEYS]
    assert shuffled_w.sort_by(keys).equals(want_w.sort_by(keys))
    assert plain_w.sort_by(keys).equals(compiled_w.sort_by(keys)) and plain_w.num_rows > 0


def test_windows_sum_the_decided_rows(traffic: Path, quota_store: Path) -> None:
    """The loop's window rows add up, per (broker, quota type, 1 s window), to what the decided rows say: the bytes
    produce recorded, the request manager's io + network percent, and the managers' own throttles."""
    table = read_dataset(traffic, REQUESTS_DIR)
    assert table is not None
    decided, windows = replay.decisions(table, load_config(quota_store), WindowSettings(), with_inputs=True)
    assert windows is not None
    d = decided.to_pandas()
    d["window_start_ms"] = d["ts_ms"] // 1000 * 1000
    got = windows.to_pandas().groupby(["broker", "quota_type", "window_start_ms"])[
        ["value_sum", "throttle_count", "throttle_ms_sum"]].sum()  # fmt: skip
    keys = ["broker", "window_start_ms"]
    produce = d[d["api_key"] == 0]
    req = d[~request_exempt(decided)].copy()
    req["t"] = req["throttle_ms_request"] > 0
    req["v"] = req["io_thread_ns"] * 1e-7 + req["network_thread_ns"] * 1e-7
    checks = {
        ("produce", "value_sum"): produce.groupby(keys)["request_bytes"].sum(),
        ("produce", "throttle_ms_sum"): produce.groupby(keys)["throttle_ms_produce"].sum(),
        ("request", "throttle_count"): req.groupby(keys)["t"].sum(),
        ("request", "throttle_ms_sum"): req.groupby(keys)["throttle_ms_request"].sum(),
        ("request", "value_sum"): req.groupby(keys)["v"].sum(),
    }
    for (qt, col), want in checks.items():
        have = got.xs(qt, level="quota_type")[col].reindex(want.index, fill_value=0)
        assert np.allclose(have.to_numpy(), want.to_numpy(), rtol=1e-9), (qt, col)
    assert (windows["rate"].to_numpy() > 0).any() and (windows["throttle_count"].to_numpy() > 0).any()


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
