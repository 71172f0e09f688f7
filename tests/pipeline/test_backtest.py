"""Spark backtest == single-process replay on generated traffic; quarantine; clear errors; vectors via Spark."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from quotaflow.cli.main import cli
from quotaflow.conformance.runner import run_set
from quotaflow.events import REQUEST_SCHEMA
from quotaflow.pipeline import backtest, job, replay

KEYS = {
    "decisions": ["broker", "seq"],
    "connections": ["broker", "seq"],
    "windows": ["broker", "quota_type", "tag_user", "tag_client_id", "window_start_ms"],
    "entities": ["broker", "quota_type", "tag_user", "tag_client_id"],
    "compare": ["broker", "quota_type", "tag_user", "tag_client_id"],
}


def _read(out: Path, name: str) -> pd.DataFrame:
    df = pq.read_table(out / name).to_pandas()
    return df.sort_values(KEYS[name]).reset_index(drop=True)


@pytest.fixture(scope="module")
def events(traffic: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated traffic plus a JSON-lines file of malformed rows (quarantine) in the same dataset."""
    root = tmp_path_factory.mktemp("events")
    shutil.copytree(traffic, root, dirs_exist_ok=True)
    bad = [{"ts_ms": 1_700_000_000_500, "broker": "broker-0", "listener": "PLAINTEXT", "user": None,
            "client_id": "c", "client_ip": "10.9.9.9", "api_key": 0, "api_version": 9, "request_bytes": 10,
            "response_bytes": 1, "io_thread_ns": 1, "network_thread_ns": 1, "acks": 1, "is_follower": False,
            "seq": 10_000_000},
           {"ts_ms": 1_700_000_000_600, "broker": "broker-1", "listener": "PLAINTEXT", "user": "u",
            "client_id": "c", "client_ip": "10.9.9.9", "api_key": 1, "api_version": 9, "request_bytes": -3,
            "response_bytes": 1, "io_thread_ns": 1, "network_thread_ns": 1, "acks": None, "is_follower": False,
            "seq": 10_000_001}]  # fmt: skip
    nullable = pa.schema([f.with_nullable(True) for f in REQUEST_SCHEMA])
    pq.write_table(pa.Table.from_pylist(bad, schema=nullable), root / "requests" / "zz-bad.parquet")
    return root


@pytest.mark.spark
def test_backtest_equals_replay(spark: Any, events: Path, quota_store: Path, loose_store: Path,
                                tmp_path: Path) -> None:  # fmt: skip
    spec_b = job.JobSpec(events, quota_store, tmp_path / "bt")
    spec_r = job.JobSpec(events, quota_store, tmp_path / "rp")
    sb = backtest.run(spec_b, spark=spark)
    sr = replay.run(spec_r)
    assert sb.counts == sr.counts
    assert sb.counts["requests_quarantined"] == 2
    for name in ("decisions", "connections", "windows", "entities"):
        a, b = _read(spec_r.out, name), _read(spec_b.out, name)[_read(spec_r.out, name).columns]
        pd.testing.assert_frame_equal(a, b, check_dtype=False, rtol=1e-9, obj=name)
    d = _read(spec_r.out, "decisions")
    assert (d["throttle_ms"] > 0).any() and (d["throttle_ms_fetch"] > 0).any() and (d["throttle_ms_request"] > 0).any()
    assert (_read(spec_r.out, "connections")["result"] == "IP_THROTTLED").any()
    q = pq.read_table(spec_b.out / "quarantine" / "requests").to_pandas().sort_values("seq")
    assert q["reason"].tolist() == ["user is null", "request_bytes is negative"]
    summary = json.loads((spec_b.out / "_SUMMARY.json").read_text())
    assert summary["counts"]["requests"] == 12_002


@pytest.mark.spark
def test_one_tenant_leaves_partitions_empty_and_still_decides(spark: Any, quota_store: Path, tmp_path: Path) -> None:
    """One (broker, component) and 4 shuffle partitions: three partitions get no rows (and no Arrow batch)."""
    rows = [{"ts_ms": 1_700_000_000_000 + 10 * i, "broker": "b0", "listener": "PLAINTEXT", "user": "tenant-0000",
             "client_id": "app", "client_ip": "10.0.0.1", "api_key": 0, "api_version": 9, "request_bytes": 500_000,
             "response_bytes": 50, "io_thread_ns": 1_000, "network_thread_ns": 100, "acks": 1, "is_follower": False,
             "seq": i} for i in range(60)]  # fmt: skip
    (tmp_path / "ev" / "requests").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema(list(REQUEST_SCHEMA))),
                   tmp_path / "ev" / "requests" / "part-0.parquet")  # fmt: skip
    assert int(spark.conf.get("spark.sql.shuffle.partitions")) > 1
    sb = backtest.run(job.JobSpec(tmp_path / "ev", quota_store, tmp_path / "bt"), spark=spark)
    sr = replay.run(job.JobSpec(tmp_path / "ev", quota_store, tmp_path / "rp"))
    assert sb.counts["requests"] == sr.counts["requests"] == 60
    a, b = _read(tmp_path / "rp", "decisions"), _read(tmp_path / "bt", "decisions")
    assert a["throttle_ms_produce"].tolist() == b["throttle_ms_produce"].tolist()
    assert (a["throttle_ms_produce"] > 0).any()  # 30 MB/s against tenant-0000's 2 MB/s


def test_replay_compare(events: Path, quota_store: Path, loose_store: Path, tmp_path: Path) -> None:
    """--compare: per quota-id throttling under both stores, and the one-row summary (Spark reuses this code)."""
    out = tmp_path / "rp"
    replay.run(job.JobSpec(events, quota_store, out, compare=loose_store))
    cmp = _read(out, "compare")
    win = pq.read_table(out / "windows").to_pandas()
    per = win.groupby(["broker", "quota_type", "tag_user", "tag_client_id"])["throttle_count"].sum()
    assert cmp.set_index(["broker", "quota_type", "tag_user", "tag_client_id"])["throttle_count_a"].to_dict() == (
        per.to_dict()
    )
    assert (cmp["throttle_count_delta"] == cmp["throttle_count_b"] - cmp["throttle_count_a"]).all()
    summary = pq.read_table(out / "compare_summary").to_pylist()[0]
    assert summary["throttle_count_b"] < summary["throttle_count_a"]  # the loose store throttles less
    assert summary["entities"] == len(cmp) and 0 < summary["entities_changed"] <= len(cmp)


def test_cli_missing_inputs(tmp_path: Path, quota_store: Path) -> None:
    runner = CliRunner()
    for cmd in ("replay", "backtest"):
        r = runner.invoke(cli, [cmd, "--events", str(tmp_path / "none"), "--store", str(quota_store),
                                "--out", str(tmp_path / "o")])  # fmt: skip
        assert r.exit_code != 0 and "does not exist" in r.output
    (tmp_path / "ev" / "requests").mkdir(parents=True)
    r = runner.invoke(cli, ["replay", "--events", str(tmp_path / "ev"), "--store", str(quota_store),
                            "--out", str(tmp_path / "o")])  # fmt: skip
    assert r.exit_code != 0 and "no event files" in r.output
    r = runner.invoke(cli, ["replay", "--events", str(tmp_path / "ev"), "--store", str(tmp_path / "x.db"),
                            "--out", str(tmp_path / "o")])  # fmt: skip
    assert r.exit_code != 0


@pytest.mark.parametrize("kind", ["requests", "connections"])
def test_cli_events_that_are_not_parquet_are_one_line(tmp_path: Path, quota_store: Path, kind: str) -> None:
    """Every command reading events says which file it cannot read, in one line, before Spark starts (replay's
    line); an --events that is a file is "not a directory"."""
    (tmp_path / "ev" / kind).mkdir(parents=True)
    bad = tmp_path / "ev" / kind / "part-00000.parquet"
    bad.write_text("ts_ms,user\n1,alice\n")  # a CSV named .parquet
    a_file = tmp_path / "events.parquet"
    a_file.write_bytes(b"")
    runner = CliRunner()
    for cmd in ("replay", "backtest", "recommend"):
        r = runner.invoke(cli, [cmd, "--events", str(tmp_path / "ev"), "--store", str(quota_store),
                                "--out", str(tmp_path / f"o-{cmd}")])  # fmt: skip
        assert r.exit_code == 1 and r.exception is not None and isinstance(r.exception, SystemExit), r.output
        assert r.output.splitlines() == [
            f"Error: cannot read {bad}: Parquet magic bytes not found in footer. Either the file is corrupted or "
            "this is not a parquet file."]
        r = runner.invoke(cli, [cmd, "--events", str(a_file), "--store", str(quota_store),
                                "--out", str(tmp_path / f"o-{cmd}")])  # fmt: skip
        assert r.exit_code == 1 and r.output == f"Error: events directory {a_file} is not a directory\n"


@pytest.mark.spark
@pytest.mark.parametrize(
    ("name", "mode", "args"),
    [
        ("rate_limit_change", "rate", ["11", "1"]),
        ("client_fetch_unrecord_on_throttle", "client", ["fetch", "11", "1", "monotonic"]),
        ("conn_ip_default_with_listener_rate", "conn", ["2", "1", "REPLICATION"]),
    ],
)
def test_vectors_through_spark(spark: Any, vectors_dir: Path, name: str, mode: str, args: list[str]) -> None:
    result = run_set(vectors_dir, name, mode, args, engine="spark")
    assert result.passed, result.problems
    assert result.rows > 0


def test_broker_config_sets_windows_and_connection_limits(events: Path, quota_store: Path, tmp_path: Path) -> None:
    """--broker-config: quota.window.* change the decisions; a broker-wide connection rate delays accepts."""
    props = tmp_path / "server.properties"
    props.write_text("quota.window.num=3\nquota.window.size.seconds=2\nmax.connection.creation.rate=5\n"
                     "inter.broker.listener.name=REPLICATION\n")  # fmt: skip
    default = replay.run(job.JobSpec(events, quota_store, tmp_path / "a"))
    tuned = replay.run(job.JobSpec(events, quota_store, tmp_path / "b", broker_config=props))
    assert default.counts == tuned.counts
    a, b = _read(tmp_path / "a", "decisions"), _read(tmp_path / "b", "decisions")
    assert not a["throttle_ms"].equals(b["throttle_ms"])
    assert b["throttle_ms_request"].max() <= 2_000 and a["throttle_ms_request"].max() <= 1_000  # cap = one window
    ca, cb = _read(tmp_path / "a", "connections"), _read(tmp_path / "b", "connections")
    assert (ca["accept_delay_ms"] == 0).all() and (cb["accept_delay_ms"] > 0).any()


def _json_rows(n: int, **over: object) -> list[dict[str, object]]:
    return [{"ts_ms": 1_700_000_000_000 + 10 * i, "broker": "b0", "listener": "PLAINTEXT", "user": "tenant-0000",
             "client_id": "app", "client_ip": "10.0.0.1", "api_key": 0, "api_version": 9, "request_bytes": 2_000_000,
             "response_bytes": 50, "io_thread_ns": 1_000, "network_thread_ns": 100, "acks": 1, "is_follower": False,
             **over} for i in range(n)]  # fmt: skip


@pytest.mark.spark
def test_bad_json_lines_are_quarantined_and_the_job_goes_on(spark: Any, quota_store: Path, tmp_path: Path) -> None:
    """Lines that are not JSON objects go to quarantine with file, line and parse error; the rest is decided the
    same by backtest and replay, and every line is counted."""
    (tmp_path / "ev" / "requests").mkdir(parents=True)
    lines = [json.dumps(r) for r in _json_rows(40)]
    lines[5] = '{"ts_ms": 1700000000050, "broker": "b0", "user": '  # cut off mid-write
    lines[17] = "not json at all"
    (tmp_path / "ev" / "requests" / "a.jsonl").write_text("\n".join(lines) + "\n")
    sb = backtest.run(job.JobSpec(tmp_path / "ev", quota_store, tmp_path / "bt"), spark=spark)
    sr = replay.run(job.JobSpec(tmp_path / "ev", quota_store, tmp_path / "rp"))
    assert sb.counts["requests"] == sr.counts["requests"] == 40
    assert sb.counts["requests_quarantined"] == sr.counts["requests_quarantined"] == 2
    for out in (tmp_path / "bt", tmp_path / "rp"):
        q = pq.read_table(out / "quarantine" / "requests").to_pylist()
        got = sorted((r["line"], r["reason"].split(":")[0]) for r in q)
        assert got == sorted([(lines[5], "invalid JSON at a.jsonl line 6"),
                              (lines[17], "invalid JSON at a.jsonl line 18")])  # fmt: skip
    a, b = _read(tmp_path / "rp", "decisions"), _read(tmp_path / "bt", "decisions")
    assert len(a) == 38 and a.equals(b[a.columns]) and (a["throttle_ms_produce"] > 0).any()


@pytest.mark.spark
@pytest.mark.parametrize("form", ["jsonl", "parquet"])
def test_uncastable_column_is_the_same_one_line_error(spark: Any, quota_store: Path, tmp_path: Path,
                                                      form: str) -> None:  # fmt: skip
    """A non-numeric ts_ms: backtest (Spark reads the Parquet itself) and replay fail with the same message, no
    Java stack trace."""
    rows = _json_rows(3)
    rows[1]["ts_ms"] = "soon"
    (tmp_path / "ev" / "requests").mkdir(parents=True)
    if form == "jsonl":
        (tmp_path / "ev" / "requests" / "a.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    else:
        for i, r in enumerate(rows):
            r["ts_ms"], r["seq"] = str(r["ts_ms"]), i
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / "ev" / "requests" / "a.parquet")
    runner = CliRunner()
    outputs = []
    for cmd in ("replay", "backtest"):
        r = runner.invoke(cli, [cmd, "--events", str(tmp_path / "ev"), "--store", str(quota_store),
                                "--out", str(tmp_path / cmd)])  # fmt: skip
        assert r.exit_code == 1, r.output
        outputs.append(r.output.strip())
    assert outputs[0] == outputs[1]
    assert outputs[0].startswith("Error: requests ") and "column ts_ms cannot be read as int64" in outputs[0]
    assert len(outputs[0].splitlines()) == 1 and "org.apache" not in outputs[0]


@pytest.mark.spark
def test_with_inputs_keeps_every_column_and_the_same_decisions(spark: Any, events: Path, quota_store: Path,
                                                                tmp_path: Path) -> None:  # fmt: skip
    """--with-inputs: the wide table (every input column and the decisions), backtest == replay; its decisions are
    the narrow table's, row for row."""
    sb = backtest.run(job.JobSpec(events, quota_store, tmp_path / "bt", with_inputs=True), spark=spark)
    sr = replay.run(job.JobSpec(events, quota_store, tmp_path / "rp", with_inputs=True))
    assert sb.counts == sr.counts
    a, b = _read(tmp_path / "rp", "decisions"), _read(tmp_path / "bt", "decisions")
    assert set(REQUEST_SCHEMA.names) <= set(a.columns) and set(a.columns) == set(b.columns)
    pd.testing.assert_frame_equal(a.astype(str), b[a.columns].astype(str), obj="decisions")
    replay.run(job.JobSpec(events, quota_store, tmp_path / "n"))
    narrow = _read(tmp_path / "n", "decisions")
    assert list(narrow.columns) == ["broker", "seq", "throttle_ms_produce", "throttle_ms_fetch", "throttle_ms_request",
                                    "throttle_ms"]  # fmt: skip
    pd.testing.assert_frame_equal(narrow, a[narrow.columns], check_dtype=False, check_categorical=False)
