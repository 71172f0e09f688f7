"""The backtest report over small Parquet fixtures laid out exactly as ``quotaflow backtest`` writes them."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from quotaflow.cli.main import cli
from quotaflow.core.errors import CommandError
from quotaflow.pipeline import report as rp

T0 = 1_700_000_000_000
ENTITIES = [  # broker, quota_type, tag_user, tag_client_id, limit (None = unlimited), base rate
    ("b0", "produce", "alice", "", 1_000_000.0, 900_000.0),
    ("b0", "fetch", "alice", "", 2_000_000.0, 1_000_000.0),
    ("b1", "produce", "", "app-1", 500_000.0, 700_000.0),
    ("b1", "request", "bob", "cli", 50.0, 30.0),
    ("b0", "produce", "carol", "", None, 100_000.0),
]


def _write(root: Path, name: str, table: pa.Table) -> None:
    (root / name).mkdir(parents=True)
    pq.write_table(table, root / name / "part-00000.parquet")


def make_backtest(root: Path, *, seconds: int = 60, compare: bool = False, seed: int = 7) -> dict[str, pa.Table]:
    """A small, self-consistent backtest output: windows and decisions derived from the same per-second rates."""
    rng = np.random.default_rng(seed)
    win: dict[str, list] = {k: [] for k in ["broker", "quota_type", "tag_user", "tag_client_id", "window_start_ms",
                                           "value_sum", "rate", "limit", "throttle_count", "throttle_ms_sum"]}
    ts_list, tp, tf, tr = [], [], [], []
    for broker, qt, user, client, limit, base in ENTITIES:
        for s in range(seconds):
            rate = float(base * (1.0 + 0.5 * np.sin(s / 6.0)) * rng.uniform(0.9, 1.1))
            over = limit is not None and rate > limit
            n_throttled = int(rng.integers(1, 5)) if over else 0
            ms = [int(rng.integers(1, 2000)) for _ in range(n_throttled)]
            win["broker"].append(broker)
            win["quota_type"].append(qt)
            win["tag_user"].append(user)
            win["tag_client_id"].append(client)
            win["window_start_ms"].append(T0 + 1000 * s)
            win["value_sum"].append(rate)
            win["rate"].append(rate)
            win["limit"].append(limit)
            win["throttle_count"].append(n_throttled)
            win["throttle_ms_sum"].append(sum(ms))
            for i in range(3 + n_throttled):
                ts_list.append(T0 + 1000 * s + i)
                t = ms[i] if i < n_throttled else 0
                tp.append(t if qt == "produce" else 0)
                tf.append(t if qt == "fetch" else 0)
                tr.append(t if qt == "request" else 0)
    windows = pa.table(win, schema=pa.schema([
        ("broker", pa.string()), ("quota_type", pa.string()), ("tag_user", pa.string()),
        ("tag_client_id", pa.string()), ("window_start_ms", pa.int64()), ("value_sum", pa.float64()),
        ("rate", pa.float64()), ("limit", pa.float64()), ("throttle_count", pa.int64()),
        ("throttle_ms_sum", pa.int64()),
    ]))
    n = len(ts_list)
    tp_a, tf_a, tr_a = (np.array(x, dtype=np.int32) for x in (tp, tf, tr))
    decisions = pa.table({
        "ts_ms": pa.array(ts_list, pa.int64()), "broker": ["b0"] * n, "listener": ["PLAINTEXT"] * n,
        "user": ["alice"] * n, "client_id": [""] * n, "client_ip": ["10.0.0.1"] * n,
        "api_key": pa.array([0] * n, pa.int16()), "api_version": pa.array([9] * n, pa.int16()),
        "request_bytes": pa.array([100] * n, pa.int64()), "response_bytes": pa.array([50] * n, pa.int64()),
        "io_thread_ns": pa.array([1000] * n, pa.int64()), "network_thread_ns": pa.array([10] * n, pa.int64()),
        "acks": pa.array([1] * n, pa.int8()), "is_follower": [False] * n, "seq": pa.array(range(n), pa.int64()),
        "throttle_ms_produce": tp_a, "throttle_ms_fetch": tf_a, "throttle_ms_request": tr_a,
        "throttle_ms": np.maximum(np.maximum(tp_a, tf_a), tr_a),
    })
    # connections: a storm between seconds 20 and 25 gets IP-throttled and delayed
    c_ts, c_res, c_delay, c_ip = [], [], [], []
    for s in range(seconds):
        per_second = 40 if 20 <= s < 25 else 5
        for i in range(per_second):
            c_ts.append(T0 + 1000 * s + i * (1000 // per_second))
            storm = 20 <= s < 25 and i >= 10
            c_res.append("IP_THROTTLED" if storm else "ACCEPTED")
            c_delay.append(int(i * 3) if 20 <= s < 25 else 0)
            c_ip.append(500 if storm else 0)
    nc = len(c_ts)
    connections = pa.table({
        "ts_ms": pa.array(c_ts, pa.int64()), "broker": ["b0"] * nc, "listener": ["PLAINTEXT"] * nc,
        "client_ip": ["10.0.0.9"] * nc, "seq": pa.array(range(nc), pa.int64()),
        "accept_delay_ms": pa.array(c_delay, pa.int64()), "ip_throttle_ms": pa.array(c_ip, pa.int64()),
        "result": c_res,
    })
    g = windows.group_by(["broker", "quota_type", "tag_user", "tag_client_id"]).aggregate([
        ("rate", "max"), ("rate", "approximate_median"), ("limit", "min"), ("throttle_count", "sum")])
    entities = pa.table({
        "broker": g["broker"], "quota_type": g["quota_type"], "tag_user": g["tag_user"],
        "tag_client_id": g["tag_client_id"], "limit": g["limit_min"], "peak_rate": g["rate_max"],
        "p99_rate": g["rate_max"], "throttled_share": pa.array([0.1 * i for i in range(g.num_rows)], pa.float64()),
        "recommended_quota": pa.compute.multiply(g["rate_max"], 1.2),
    })
    tables = {"decisions": decisions, "connections": connections, "windows": windows, "entities": entities}
    if compare:
        tables["compare"] = pa.table({
            "broker": g["broker"], "quota_type": g["quota_type"], "tag_user": g["tag_user"],
            "tag_client_id": g["tag_client_id"],
            "throttle_count_a": pa.array([1, 2, 3, 4, 5], pa.int64()),
            "throttle_count_b": pa.array([1, 0, 3, 9, 5], pa.int64()),
            "throttle_ms_a": pa.array([10, 200, 30, 40, 50], pa.int64()),
            "throttle_ms_b": pa.array([10, 0, 30, 940, 50], pa.int64()),
            "throttle_count_delta": pa.array([0, -2, 0, 5, 0], pa.int64()),
            "throttle_ms_delta": pa.array([0, -200, 0, 900, 0], pa.int64()),
        })
    for name, table in tables.items():
        _write(root, name, table)
    return tables


@pytest.fixture()
def backtest(tmp_path: Path) -> tuple[Path, dict[str, pa.Table]]:
    root = tmp_path / "bt"
    return root, make_backtest(root)


def _images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def test_report_is_one_self_contained_page_with_its_pngs(backtest: tuple[Path, dict[str, pa.Table]],
                                                         tmp_path: Path) -> None:
    root, _ = backtest
    out = tmp_path / "out"
    result = rp.build_report(root, out)
    page = result.html_path.read_text()
    images = _images(page)
    assert [p.name for p in result.png_paths] == ["rate_vs_quota.png", "throttle_distribution.png", "connections.png"]
    # every chart is inlined byte-for-byte as the PNG file next to the page, and nothing is fetched from elsewhere
    assert images == [p.read_bytes() for p in result.png_paths]
    assert all(img.startswith(b"\x89PNG\r\n\x1a\n") for img in images)
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert "Comparison" not in page  # no compare/ dataset, no comparison section


def test_summary_numbers_come_from_the_decisions(backtest: tuple[Path, dict[str, pa.Table]], tmp_path: Path) -> None:
    root, tables = backtest
    result = rp.build_report(root, tmp_path / "out")
    by_type = {r["quota type"]: r for r in result.summary["throttle"]}
    d = tables["decisions"]
    for qt in ("produce", "fetch", "request"):
        values = np.asarray(d[f"throttle_ms_{qt}"])
        positive = values[values > 0]
        assert by_type[qt]["requests"] == d.num_rows
        assert by_type[qt]["throttled"] == positive.size
        assert by_type[qt]["throttle ms total"] == int(positive.sum())
        assert by_type[qt]["max ms"] == (int(positive.max()) if positive.size else 0)
    assert by_type["produce"]["throttled"] > 0  # the fixture over-runs two produce quotas
    conns = tables["connections"]
    throttled = sum(r == "IP_THROTTLED" for r in conns["result"].to_pylist())
    assert result.summary["connections"]["IP throttled"] == throttled


def test_top_entities_rank_by_throttle_time_then_rate_over_quota(backtest: tuple[Path, dict[str, pa.Table]]) -> None:
    _, tables = backtest
    w = tables["windows"]
    top = rp.top_entities(w, n=10)
    throttle_ms = [r["throttle_ms_sum_sum"] for r in top]
    assert throttle_ms == sorted(throttle_ms, reverse=True)
    assert {(r["tag_user"], r["tag_client_id"]) for r in top[:2]} == {("alice", ""), ("", "app-1")}
    unthrottled = [r for r in top if r["throttle_ms_sum_sum"] == 0]
    ratios = [(r["rate_max"] / r["limit_min"]) if r["limit_min"] else 0.0 for r in unthrottled]
    assert ratios == sorted(ratios, reverse=True)
    assert unthrottled[-1]["limit_min"] is None  # the unlimited entity comes last
    # with few slots, every quota type still gets one: the most throttled produce entity, then fetch and request
    spread = rp.top_entities(w, n=3, per_type=1)
    assert sorted(r["quota_type"] for r in spread) == ["fetch", "produce", "request"]
    assert spread[0]["throttle_ms_sum_sum"] == max(throttle_ms)


def test_connection_timeline_buckets_per_second() -> None:
    conns = pa.table({
        "ts_ms": pa.array([1000, 1500, 1999, 2000, 4100], pa.int64()),
        "result": ["ACCEPTED", "IP_THROTTLED", "ACCEPTED", "ACCEPTED", "IP_THROTTLED"],
        "accept_delay_ms": pa.array([0, 10, 20, None, 0], pa.int64()),
        "ip_throttle_ms": pa.array([0, 300, 0, 0, 700], pa.int64()),
    })
    tl, t0, totals = rp.connection_timeline(conns)
    assert t0 == 1000
    assert tl.accepted.tolist() == [2, 1, 0, 0]
    assert tl.ip_throttled.tolist() == [1, 0, 0, 1]
    assert tl.max_delay_ms.tolist() == [20.0, 0.0, 0.0, 0.0]
    assert tl.mean_delay_ms.tolist() == [10.0, 0.0, 0.0, 0.0]
    assert tl.max_ip_throttle_ms.tolist() == [300.0, 0.0, 0.0, 700.0]
    assert totals["IP throttled"] == 2 and totals["accepted"] == 3


def test_compare_table_is_rendered_sorted_by_largest_change(tmp_path: Path) -> None:
    root = tmp_path / "bt"
    make_backtest(root, compare=True, seconds=10)
    result = rp.build_report(root, tmp_path / "out")
    assert result.summary["compare_rows"] == 5
    page = result.html_path.read_text()
    assert "Comparison of the two configs" in page
    rows = rp.compare_table(rp.open_backtest(root)["compare"])
    assert [r["throttle_ms_delta"] for r in rows][:2] == [900, -200]


def test_empty_backtest_still_renders(tmp_path: Path) -> None:
    root = tmp_path / "bt"
    tables = make_backtest(root, seconds=1)
    for name, table in tables.items():
        pq.write_table(table.slice(0, 0), root / name / "part-00000.parquet")
    result = rp.build_report(root, tmp_path / "out")
    assert len(_images(result.html_path.read_text())) == 3
    assert result.summary["top_entities"] == []


def test_missing_input_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="backtest output directory not found"):
        rp.build_report(tmp_path / "nope", tmp_path / "out")
    (tmp_path / "half" / "windows").mkdir(parents=True)
    with pytest.raises(CommandError, match=r"missing decisions/, entities/"):
        rp.build_report(tmp_path / "half", tmp_path / "out")


def test_cli(backtest: tuple[Path, dict[str, pa.Table]], tmp_path: Path) -> None:
    root, _ = backtest
    out = tmp_path / "out"
    ok = CliRunner().invoke(cli, ["report", "--in", str(root), "--out", str(out)])
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.strip().endswith("report.html") and (out / "report.html").is_file()
    bad = CliRunner().invoke(cli, ["report", "--in", str(tmp_path / "missing"), "--out", str(out)])
    assert bad.exit_code == 1
    assert "backtest output directory not found" in bad.output
