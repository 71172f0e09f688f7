"""The usage event log: schema round trip, rolling, atomic files, nothing lost on close, bounded loss on crash."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from quotaflow.events import CONNECTIONS_DIR, REQUESTS_DIR, dataset_files, read_dataset
from quotaflow.gateway.eventlog import CONNECTION_LOG_SCHEMA, REQUEST_LOG_SCHEMA, EventLog, EventLogError


def request_row(i: int, **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "ts_ms": 1_700_000_000_000 + i,
        "listener": "PLAINTEXT",
        "user": "alice" if i % 2 else "ANONYMOUS",
        "client_id": f"c{i % 3}",
        "client_ip": "127.0.0.1",
        "api_key": 0 if i % 2 else 1,
        "api_version": 9,
        "request_bytes": 100 + i,
        "response_bytes": 50 + i,
        "io_thread_ns": 1000 * i,
        "network_thread_ns": 10 * i,
        "acks": 1 if i % 2 else None,
        "is_follower": False,
        "throttle_ms_produce": i % 5,
        "throttle_ms_fetch": 0,
        "throttle_ms_request": 0,
        "throttle_ms": i % 5,
    }
    row.update(over)
    return row


def connection_row(i: int) -> dict[str, Any]:
    return {
        "ts_ms": 1_700_000_000_000 + i,
        "listener": "PLAINTEXT",
        "client_ip": f"127.0.0.{1 + i % 2}",
        "accept_delay_ms": 0,
        "ip_throttle_ms": 7 if i % 2 else 0,
        "result": "IP_THROTTLED" if i % 2 else "ACCEPTED",
    }


def test_round_trip_in_the_event_schema(tmp_path: Path) -> None:
    rows = [request_row(i) for i in range(25)]
    conns = [connection_row(i) for i in range(4)]
    with EventLog(tmp_path, "gw-1") as log:
        for r, c in zip(rows, [*conns, *[None] * 21], strict=True):
            log.request(dict(r))  # the log takes ownership of the dict it is given
            if c is not None:
                log.connection(c)
    requests = read_dataset(tmp_path, REQUESTS_DIR)
    connections = read_dataset(tmp_path, CONNECTIONS_DIR)
    assert requests is not None and connections is not None
    for kind, schema in ((REQUESTS_DIR, REQUEST_LOG_SCHEMA), (CONNECTIONS_DIR, CONNECTION_LOG_SCHEMA)):
        for f in dataset_files(tmp_path / kind):
            assert pq.read_schema(f).remove_metadata().equals(schema)  # names, types and nullability
    got = requests.sort_by("seq").to_pylist()
    assert [{k: v for k, v in g.items() if k not in ("broker", "seq")} for g in got] == rows
    assert {g["broker"] for g in got} == {"gw-1"}
    # one arrival counter over both kinds: seqs are distinct and increase in call order within a kind
    seqs = [g["seq"] for g in got] + [c["seq"] for c in connections.to_pylist()]
    assert len(set(seqs)) == len(seqs) == 29
    assert connections.sort_by("seq").column("result").to_pylist() == [c["result"] for c in conns]


def test_caller_seq_and_broker_are_kept(tmp_path: Path) -> None:
    with EventLog(tmp_path, "gw") as log:
        log.request(request_row(0, seq=41, broker="other"))
    table = read_dataset(tmp_path, REQUESTS_DIR)
    assert table is not None
    assert table.to_pylist()[0]["seq"] == 41 and table.to_pylist()[0]["broker"] == "other"


def test_rolls_by_rows(tmp_path: Path) -> None:
    with EventLog(tmp_path, "gw", roll_rows=10, roll_seconds=60) as log:
        for i in range(25):
            log.request(request_row(i))
        log.flush()
        assert log.files_written[REQUESTS_DIR] == 3  # 10 + 10 rolled by count, 5 by the flush
    files = dataset_files(tmp_path / REQUESTS_DIR)
    assert sorted(pq.read_metadata(f).num_rows for f in files) == [5, 10, 10]


def test_rolls_by_time_without_close(tmp_path: Path) -> None:
    log = EventLog(tmp_path, "gw", roll_rows=1000, roll_seconds=0.2)
    try:
        log.request(request_row(0))
        deadline = time.monotonic() + 5
        while not dataset_files(tmp_path / REQUESTS_DIR) and time.monotonic() < deadline:
            time.sleep(0.02)
        files = dataset_files(tmp_path / REQUESTS_DIR)
        assert len(files) == 1 and pq.read_metadata(files[0]).num_rows == 1
    finally:
        log.close()


def test_readers_never_see_a_partial_file(tmp_path: Path) -> None:
    stop = threading.Event()
    bad: list[str] = []
    reads = 0

    def reader() -> None:
        nonlocal reads
        while not stop.is_set():
            for f in dataset_files(tmp_path / REQUESTS_DIR):
                try:
                    pq.read_table(f)
                    reads += 1
                except Exception as e:
                    bad.append(f"{f.name}: {e}")

    t = threading.Thread(target=reader)
    t.start()
    try:
        with EventLog(tmp_path, "gw", roll_rows=50) as log:
            for i in range(3000):
                log.request(request_row(i))
    finally:
        stop.set()
        t.join()
    assert bad == []
    assert reads > 0
    assert [p.name for p in (tmp_path / REQUESTS_DIR).iterdir() if p.name.startswith(".")] == []
    table = read_dataset(tmp_path, REQUESTS_DIR)
    assert table is not None and sorted(table.column("seq").to_pylist()) == list(range(3000))


def test_a_crash_loses_at_most_the_unflushed_tail(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_eventlog import request_row
        from quotaflow.gateway.eventlog import EventLog
        log = EventLog({str(tmp_path)!r}, "gw", roll_rows=100, roll_seconds=60)
        for i in range(150):
            log.request(request_row(i))
        log.flush()
        for i in range(150, 180):
            log.request(request_row(i))
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    table = read_dataset(tmp_path, REQUESTS_DIR)
    assert table is not None
    seqs = sorted(table.column("seq").to_pylist())
    assert seqs[:150] == list(range(150))  # everything flushed survived, in complete files
    assert seqs == list(range(len(seqs))) and len(seqs) <= 180


def test_writer_failure_is_raised_not_swallowed(tmp_path: Path) -> None:
    log = EventLog(tmp_path, "gw")
    row = request_row(0)
    del row["user"]  # a required column
    log.request(row)
    with pytest.raises(EventLogError):
        log.flush()
    with pytest.raises(EventLogError):
        log.request(request_row(1))
    with pytest.raises(EventLogError):
        log.close()


def test_closed_log_refuses_rows(tmp_path: Path) -> None:
    log = EventLog(tmp_path, "gw")
    log.close()
    log.close()
    with pytest.raises(EventLogError):
        log.connection(connection_row(0))
