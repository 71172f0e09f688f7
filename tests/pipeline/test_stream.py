"""Cluster-wide metering: what each quota type meters, the stream equal to a batch over the same files, publication,
quarantine, and exactly-once across a SIGKILL of a real ``quotaflow stream`` process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quotaflow.core.errors import CommandError
from quotaflow.events import REQUEST_DECISION_FIELDS, REQUEST_SCHEMA, EventsInputError
from quotaflow.pipeline import stream as st

T0 = 1_700_000_000_000
KEY = ("window_start_ms", "user", "client_id")


def make_events(rng: np.random.Generator, start_ms: int, span_ms: int, n: int) -> pa.Table:
    """Random request events from three brokers: produce (acks 0/1/all), fetch (some follower), metadata, LAIR."""
    ts = np.sort(rng.integers(start_ms, start_ms + span_ms, n))
    api = rng.choice(np.array([0, 1, 3, 4], dtype=np.int16), n)
    acks = [int(rng.choice([0, 1, -1])) if a == 0 else None for a in api]
    return pa.table({
        "ts_ms": ts, "broker": rng.choice(["b0", "b1", "b2"], n), "listener": ["PLAINTEXT"] * n,
        "user": rng.choice(["alice", "bob", "carol"], n), "client_id": rng.choice(["", "app-1"], n),
        "client_ip": ["10.0.0.1"] * n, "api_key": api, "api_version": np.full(n, 9, np.int16),
        "request_bytes": rng.integers(0, 10_000, n), "response_bytes": rng.integers(0, 10_000, n),
        "io_thread_ns": rng.integers(0, 1_000_000, n), "network_thread_ns": rng.integers(0, 100_000, n),
        "acks": pa.array(acks, pa.int8()), "is_follower": (api == 1) & (rng.random(n) < 0.2),
        "seq": np.arange(n),
    }, schema=REQUEST_SCHEMA)


def drop_file(requests: Path, name: str, table: pa.Table) -> None:
    """Write then rename, as the gateway's event log does: the file source never sees a half-written file."""
    tmp = requests / f".{name}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, requests / name)


def rows(df: Any) -> list[dict[str, Any]]:
    return sorted((r.asDict() for r in df.collect()), key=lambda r: tuple(r[k] for k in KEY))


def expected_closed(spark: Any, events: Path, window_ms: int, watermark_ms: int) -> list[dict[str, Any]]:
    """The batch computation over every good input row, restricted to the windows the final watermark has closed."""
    from pyspark.sql import functions as F

    reader = spark.read.schema(st.request_schema()).option("pathGlobFilter", "*.parquet")
    df = reader.parquet(str(events / "requests")).where(F.col("request_bytes") >= 0)
    watermark = df.agg(F.max("ts_ms")).first()[0] - watermark_ms
    return rows(st.usage(df, window_ms).where(F.col("window_end_ms") <= watermark))


def test_durations() -> None:
    assert [st.parse_duration_ms(t) for t in ("1s", "500ms", "10", "2m", "1h")] == [1000, 500, 10_000, 120_000,
                                                                                  3_600_000]
    for bad in ("", "0s", "1d", "-1s", "abc"):
        with pytest.raises(CommandError):
            st.parse_duration_ms(bad)


def test_rates_document_keeps_the_latest_window_per_entity_and_type() -> None:
    def row(start: int, user: str, produce: int) -> dict[str, Any]:
        return {"window_start_ms": start, "window_end_ms": start + 1000, "user": user, "client_id": "c",
                "produce_bytes": produce, "fetch_bytes": 0, "request_thread_ns": 0, "throttle_ms": 0,
                "produce_rate": float(produce), "fetch_rate": 0.0, "request_rate": 0.0}

    first = st.rates_document({}, [row(1000, "a", 5), row(2000, "a", 7), row(1000, "b", 3)], 1000)
    produce = {e["user"]: e for e in first["rates"] if e["quota_type"] == "produce"}
    assert (produce["a"]["window_start_ms"], produce["a"]["value"]) == (2000, 7)
    assert (produce["b"]["window_start_ms"], produce["b"]["value"]) == (1000, 3)
    assert first["latest_window_start_ms"] == 2000
    assert len(first["rates"]) == 6  # 2 entities x 3 quota types
    second = st.rates_document(first, [row(3000, "b", 11)], 1000)
    produce = {e["user"]: e for e in second["rates"] if e["quota_type"] == "produce"}
    assert (produce["a"]["value"], produce["b"]["value"]) == (7, 11)  # a untouched, b moved on


def test_published_file_is_replaced_whole_and_world_readable(tmp_path: Path) -> None:
    path = tmp_path / "out" / "cluster_rates.json"
    st.atomic_write_json(path, {"rates": [1]})
    st.atomic_write_json(path, {"rates": [2]})
    assert json.loads(path.read_text()) == {"rates": [2]}
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["cluster_rates.json"]  # no temporary left behind


def test_missing_input_is_a_clear_error(tmp_path: Path) -> None:
    cfg = st.StreamConfig(events=tmp_path / "none", checkpoint=tmp_path / "c", out=tmp_path / "o")
    with pytest.raises(EventsInputError, match="does not exist"):
        st.check_inputs(cfg)
    (tmp_path / "none").mkdir()
    with pytest.raises(EventsInputError, match="no requests/ directory"):
        st.check_inputs(cfg)


@pytest.mark.spark
def test_usage_meters_what_each_quota_type_counts(spark: Any) -> None:
    """Produce bytes of api 0, fetch bytes of non-follower api 1, thread time except the KIP-124 exemptions, summed
    over brokers per (user, client_id, window)."""
    base = {"listener": "L", "client_ip": "ip", "api_version": 1, "seq": 0, "user": "u", "client_id": "c"}
    events = [  # ts, broker, api, acks, follower, request_bytes, response_bytes, io_ns, net_ns, applied throttle
        (T0 + 10, "b0", 0, 1, False, 100, 7, 1_000, 10, 0),      # produce acks=1: bytes + thread time
        (T0 + 20, "b1", 0, 0, False, 50, 0, 2_000, 20, 30),      # produce acks=0: bytes, request-quota exempt
        (T0 + 30, "b2", 1, None, False, 9, 1_000, 4_000, 40, 12),  # consumer fetch: response bytes + thread time
        (T0 + 40, "b0", 1, None, True, 9, 5_000, 8_000, 80, None),  # follower fetch: exempt from both
        (T0 + 50, "b1", 3, None, False, 9, 9, 16_000, 160, None),   # metadata: thread time only
        (T0 + 60, "b2", 4, None, False, 9, 9, 32_000, 320, None),   # LEADER_AND_ISR: exempt-throttle API
        (T0 + 70, "b0", 52, None, False, 9, 9, 128_000, 1_280, None),  # VOTE: cluster action, counted (no error)
        (T0 + 1_010, "b0", 0, -1, False, 300, 0, 64_000, 640, 0),  # next window
    ]
    table = pa.Table.from_pylist([
        {**base, "ts_ms": t, "broker": b, "api_key": a, "acks": k, "is_follower": f, "request_bytes": rq,
         "response_bytes": rs, "io_thread_ns": io, "network_thread_ns": net, "throttle_ms": th}
        for t, b, a, k, f, rq, rs, io, net, th in events
    ], schema=pa.schema([*REQUEST_SCHEMA, *REQUEST_DECISION_FIELDS]))  # per-type throttle columns left null
    df = spark.createDataFrame(table.to_pandas(), st.request_schema())
    out = rows(st.usage(df, 1000))
    assert [(r["window_start_ms"], r["requests"]) for r in out] == [(T0, 7), (T0 + 1000, 1)]
    first, second = out
    assert first["produce_bytes"] == 100 + 50
    assert first["fetch_bytes"] == 1_000
    assert first["request_thread_ns"] == (1_000 + 10) + (4_000 + 40) + (16_000 + 160) + (128_000 + 1_280)
    assert first["request_rate"] == pytest.approx(first["request_thread_ns"] * 1e-7)
    assert (first["throttled_requests"], first["throttle_ms"]) == (2, 30 + 12)  # null = no decision logged
    assert (second["throttled_requests"], second["throttle_ms"]) == (0, 0)
    assert (second["produce_bytes"], second["produce_rate"]) == (300, 300.0)
    half = rows(st.usage(df, 500))  # a 0.5 s window doubles the per-second rate of the same bytes
    assert half[0]["produce_rate"] == 2.0 * half[0]["produce_bytes"]


@pytest.mark.spark
def test_stream_equals_batch_and_publishes_and_quarantines(spark: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    requests = tmp_path / "events" / "requests"
    requests.mkdir(parents=True)
    for i in range(3):
        drop_file(requests, f"part-{i}.parquet", make_events(rng, T0 + 2000 * i, 2000, 300))
    bad = make_events(rng, T0 + 5000, 10, 2).to_pylist()
    bad[0]["request_bytes"] = -5
    drop_file(requests, "part-bad.parquet", pa.Table.from_pylist(bad, schema=REQUEST_SCHEMA))
    (requests / "README.txt").write_text("not an event file")  # skipped, like events.dataset_files does
    cfg = st.StreamConfig(events=tmp_path / "events", checkpoint=tmp_path / "ckpt", out=tmp_path / "out",
                          watermark_ms=1500, available_now=True, max_files_per_trigger=2)
    progress = st.run(spark, cfg)
    assert progress.input_rows == 3 * 300 + 2

    # bad rows are reported, not dropped; the good row of that file is metered
    quarantined = spark.read.parquet(str(cfg.out / "quarantine")).collect()
    assert [(r["request_bytes"], r["reason"]) for r in quarantined] == [(-5, "request_bytes is negative")]
    got = rows(spark.read.parquet(str(cfg.usage_dir)))
    assert got == expected_closed(spark, cfg.events, cfg.window_ms, cfg.watermark_ms)
    assert len(got) > 9

    doc = json.loads(cfg.rates_path.read_text())
    latest = st.latest_windows(got)
    assert {(e["user"], e["client_id"]) for e in doc["rates"]} == set(latest)
    for e in doc["rates"]:
        r = latest[(e["user"], e["client_id"])]
        assert (e["window_start_ms"], e["rate"]) == (r["window_start_ms"], r[f"{e['quota_type']}_rate"])


def _batches(d: Path) -> int:
    return sum(1 for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else 0


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)  # ~1 min on an idle machine; two Spark start-ups stretch far when cores are shared
def test_sigkill_mid_run_then_restart_writes_every_window_exactly_once(spark: Any, tmp_path: Path) -> None:
    """A real ``quotaflow stream`` process and its JVM are SIGKILLed while a micro-batch is running; more files
    arrive; a restart on the same checkpoint (available-now) must leave every closed window exactly once."""
    rng = np.random.default_rng(5)
    events, ckpt, out = tmp_path / "events", tmp_path / "ckpt", tmp_path / "out"
    requests = events / "requests"
    requests.mkdir(parents=True)
    window_ms, watermark_ms, n_files = 1000, 1500, 9
    files = [make_events(rng, T0 + 1000 * i, 1000, 100) for i in range(n_files)]
    for i in range(6):
        drop_file(requests, f"part-{i:02d}.parquet", files[i])
    cmd = [sys.executable, "-m", "quotaflow.cli.main", "stream", "--events", str(events), "--checkpoint", str(ckpt),
           "--out", str(out), "--window", "1s", "--watermark", "1500ms"]
    with (tmp_path / "first.log").open("w") as log:
        first = subprocess.Popen([*cmd, "--trigger-seconds", "0.2", "--max-files-per-trigger", "1"], stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)  # own group: JVM dies with it
    offsets, commits = ckpt / "usage" / "offsets", ckpt / "usage" / "commits"
    mid_batch = False
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and first.poll() is None:
            done, started = _batches(commits), _batches(offsets)
            if done >= 1 and started > done:  # batch `done` is running, earlier output is committed: kill now
                mid_batch = True
                break
            time.sleep(0.01)
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    assert mid_batch, "the stream did not reach its second batch in time"
    assert _batches(commits) < 6  # files were left unprocessed for the restart

    for i in range(6, n_files):
        drop_file(requests, f"part-{i:02d}.parquet", files[i])
    second = subprocess.run([*cmd, "--available-now"], capture_output=True, text=True, timeout=360)
    assert second.returncode == 0, second.stderr[-3000:]

    got = rows(spark.read.parquet(str(out / "usage")))
    keys = [tuple(r[k] for k in KEY) for r in got]
    assert len(keys) == len(set(keys)), "a window was written twice"
    assert got == expected_closed(spark, events, window_ms, watermark_ms)  # and none is missing or different
    closed = n_files - 2  # the final watermark (max ts - 1.5 s) closes all but the last two 1 s windows
    assert {r["window_start_ms"] for r in got} == {T0 + 1000 * i for i in range(closed)}
    doc = json.loads((out / "cluster_rates.json").read_text())
    assert doc["latest_window_start_ms"] == T0 + 1000 * (closed - 1)
