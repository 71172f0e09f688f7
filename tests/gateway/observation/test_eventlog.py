"""The usage event log: schema round trip, rolling, atomic files, nothing lost on close, bounded loss on crash."""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest

from quotaflow.events import CONNECTIONS_DIR, REQUESTS_DIR, SHADOW_CONNECTION_FIELDS, dataset_files, read_dataset
from quotaflow.gateway.data import pending as pending_module
from quotaflow.gateway.observation import eventlog
from quotaflow.gateway.observation.eventlog import (
    CONNECTION_LOG_SCHEMA,
    REQUEST_LOG_SCHEMA,
    EventLog,
    EventLogError,
    RequestRow,
)
from twins import forms

REQUIRED_REQUEST_COLUMNS = [f.name for f in REQUEST_LOG_SCHEMA if not f.nullable]


def request_values(i: int) -> dict[str, Any]:
    """Request ``i``'s values by column name but ``seq`` (every column's value varies, so a misplaced one shows)."""
    return {
        "ts_ms": 1_700_000_000_000 + i,
        "broker": "gw-1" if i % 4 else "gw-1-node-2",
        "listener": "PLAINTEXT" if i % 3 else "SASL_SSL",
        "user": "alice" if i % 2 else "ANONYMOUS",
        "client_id": f"c{i % 3}",
        "client_ip": f"127.0.0.{1 + i % 5}",
        "api_key": 0 if i % 2 else 1,
        "api_version": 9 - i % 4,
        "request_bytes": 100 + i,
        "response_bytes": 50 + 2 * i,
        "io_thread_ns": 1000 * i,
        "network_thread_ns": 10 * i + 3,
        "acks": (-1 if i % 3 else 1) if i % 2 else None,
        "is_follower": i % 7 == 6,
        "throttle_ms_produce": i % 5,
        "throttle_ms_fetch": i % 6,
        "throttle_ms_request": i % 4,
        "throttle_ms": max(i % 5, i % 6, i % 4),
    }


def request_row(log: EventLog, i: int, **over: Any) -> RequestRow:
    """Request ``i`` as the gateway hands it to the log: a tuple in the schema's column order, ``seq`` from the log
    (``over`` replaces values by column name)."""
    values = {**request_values(i), "seq": None if "seq" in over else log.next_seq(), **over}
    return tuple(values[name] for name in REQUEST_LOG_SCHEMA.names)  # type: ignore[return-value]


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
    """Every column of every row comes back as it was given, in the schema of :mod:`quotaflow.events`."""
    rows: list[RequestRow] = []
    conns = [connection_row(i) for i in range(4)]
    with EventLog(tmp_path, "gw-1") as log:
        for i, c in enumerate([*conns, *[None] * 21]):
            rows.append(request_row(log, i))
            log.request(rows[-1])
            if c is not None:
                log.connection(dict(c))  # the log takes ownership of the dict it is given (fills broker and seq)
    requests = read_dataset(tmp_path, REQUESTS_DIR)
    connections = read_dataset(tmp_path, CONNECTIONS_DIR)
    assert requests is not None and connections is not None
    for kind, schema in ((REQUESTS_DIR, REQUEST_LOG_SCHEMA), (CONNECTIONS_DIR, CONNECTION_LOG_SCHEMA)):
        for f in dataset_files(tmp_path / kind):
            assert pq.read_schema(f).remove_metadata().equals(schema)  # names, types and nullability
    got = requests.sort_by("seq").to_pylist()
    assert got == [dict(zip(REQUEST_LOG_SCHEMA.names, r, strict=True)) for r in rows]  # every column
    assert {g["is_follower"] for g in got} == {False, True} and {g["acks"] for g in got} == {None, -1, 1}
    got_conns = connections.sort_by("seq").to_pylist()
    shadow = dict.fromkeys(f.name for f in SHADOW_CONNECTION_FIELDS)  # null while no shadow quota set runs
    assert [{k: v for k, v in g.items() if k not in ("broker", "seq")} for g in got_conns] == [
        {**c, **shadow} for c in conns]
    assert {g["broker"] for g in got_conns} == {"gw-1"}  # the log's own
    # one arrival counter over both kinds, in call order: request i, then connection i
    assert [g["seq"] for g in got] == [0, 2, 4, 6, *range(8, 29)]
    assert [c["seq"] for c in got_conns] == [1, 3, 5, 7]


def test_only_string_columns_are_dictionary_encoded(tmp_path: Path) -> None:
    """A file's string columns repeat and keep Parquet's dictionary; its numbers (timestamps, sequence numbers,
    sizes, thread times) are written plain: a dictionary for them cost the writer half its CPU (``write_table``)."""
    with EventLog(tmp_path, "gw") as log:
        for i in range(50):
            log.request(request_row(log, i))
    (f,) = dataset_files(tmp_path / REQUESTS_DIR)
    group = pq.read_metadata(f).row_group(0)
    encodings = {group.column(c).path_in_schema: group.column(c).encodings for c in range(group.num_columns)}
    strings = {name for name in REQUEST_LOG_SCHEMA.names if REQUEST_LOG_SCHEMA.field(name).type == "string"}
    assert strings == {"broker", "listener", "user", "client_id", "client_ip"}
    for name, used in encodings.items():
        assert ("RLE_DICTIONARY" in used) == (name in strings), (name, used)


def test_caller_seq_and_broker_of_a_connection_row_are_kept(tmp_path: Path) -> None:
    with EventLog(tmp_path, "gw") as log:
        log.connection({**connection_row(0), "seq": 41, "broker": "other"})
    table = read_dataset(tmp_path, CONNECTIONS_DIR)
    assert table is not None
    assert table.to_pylist()[0]["seq"] == 41 and table.to_pylist()[0]["broker"] == "other"


def test_rolls_by_rows(tmp_path: Path) -> None:
    with EventLog(tmp_path, "gw", roll_rows=10, roll_seconds=60) as log:
        for i in range(25):
            log.request(request_row(log, i))
        log.flush()
        assert log.files_written[REQUESTS_DIR] == 3  # 10 + 10 rolled by count, 5 by the flush
    files = dataset_files(tmp_path / REQUESTS_DIR)
    assert sorted(pq.read_metadata(f).num_rows for f in files) == [5, 10, 10]


def test_rolls_by_time_without_close(tmp_path: Path) -> None:
    log = EventLog(tmp_path, "gw", roll_rows=1000, roll_seconds=0.2)
    try:
        log.request(request_row(log, 0))
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
                log.request(request_row(log, i))
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
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parents[2])!r}]  # + tests/
        from test_eventlog import request_row
        from quotaflow.gateway.observation.eventlog import EventLog
        log = EventLog({str(tmp_path)!r}, "gw", roll_rows=100, roll_seconds=60)
        for i in range(150):
            log.request(request_row(log, i))
        log.flush()
        for i in range(150, 180):
            log.request(request_row(log, i))
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    table = read_dataset(tmp_path, REQUESTS_DIR)
    assert table is not None
    seqs = sorted(table.column("seq").to_pylist())
    assert seqs[:150] == list(range(150))  # everything flushed survived, in complete files
    assert seqs == list(range(len(seqs))) and len(seqs) <= 180


@pytest.mark.parametrize("column", REQUIRED_REQUEST_COLUMNS)
def test_a_row_without_a_required_value_stops_the_log_and_is_raised(tmp_path: Path, column: str) -> None:
    """A row that breaks the schema is a bug in the caller: the writer refuses it, the next call raises, no file
    holds it (nor the rows of its batch)."""
    log = EventLog(tmp_path, "gw")
    log.request(request_row(log, 0))
    log.request(request_row(log, 1, **{column: None}))
    with pytest.raises(EventLogError, match=f"without a value for required column {column}"):
        log.flush()
    with pytest.raises(EventLogError):
        log.request(request_row(log, 2))
    with pytest.raises(EventLogError):
        log.close()
    assert seqs_on_disk(tmp_path) == []


@pytest.mark.parametrize("bad", ["one value short", "a value out of its column's type"])
def test_a_row_of_another_shape_stops_the_log_and_is_raised(tmp_path: Path, bad: str) -> None:
    """A tuple missing a column (a caller built for another schema) or with a value of another type is refused, not
    written shifted or cast, and the error says what a row must be."""
    log = EventLog(tmp_path, "gw")
    log.request(request_row(log, 0))
    row = request_row(log, 1)[:-1] if bad == "one value short" else request_row(log, 1, api_key="Produce")
    log.request(row)  # type: ignore[arg-type]
    with pytest.raises(EventLogError, match="a requests row does not fit its schema \\(tuples of 19 values: ts_ms, "):
        log.flush()
    with pytest.raises(EventLogError):
        log.request(request_row(log, 2))
    with pytest.raises(EventLogError):
        log.close()
    assert seqs_on_disk(tmp_path) == []


def test_closed_log_refuses_rows(tmp_path: Path) -> None:
    """Every way in refuses once closed, the connection core's (``request_rows``, a compiled queue) too."""
    log = EventLog(tmp_path, "gw")
    log.request(request_row(log, 0))
    log.close()
    log.close()
    with pytest.raises(EventLogError, match="closed"):
        log.connection(connection_row(1))
    with pytest.raises(EventLogError, match="closed"):
        log.request(request_row(log, 2))
    with pytest.raises(EventLogError, match="closed"):
        log.request_rows.append(request_row(log, 3))
    assert log.request_rows.appended == 1 and seqs_on_disk(tmp_path) == [0]


# -- cost per row: batches, never a wake-up per row -----------------------------------------------------------------


def test_rows_are_taken_in_batches_not_one_wake_up_per_row(tmp_path: Path) -> None:
    n = 20_000
    with EventLog(tmp_path, "gw", batch_seconds=0.05, roll_seconds=60) as log:
        log.wait_ready()
        before = log.wakeups
        started = time.monotonic()
        for i in range(n):
            log.request(request_row(log, i))
        elapsed = time.monotonic() - started
        log.flush()
        turns = log.wakeups - before
        assert log.rows_written[REQUESTS_DIR] == n
    # the writer only turns on its 50 ms timer (and once for the flush): one wake-up per row would be ~20,000
    assert turns <= elapsed / 0.05 + 3, (turns, elapsed)
    assert turns < n / 100


# -- pyarrow warmed at start --------------------------------------------------------------------------------------


def test_pyarrow_is_warmed_before_the_first_row(tmp_path: Path) -> None:
    """In a fresh interpreter, the writer's warm-up takes pyarrow's first-use cost, so the first real file costs a
    small fraction of it (CPU time of the whole process, not wall time)."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parents[2])!r}]  # + tests/
        from test_eventlog import request_row
        from quotaflow.gateway.observation.eventlog import EventLog
        log = EventLog({str(tmp_path)!r}, "gw", roll_seconds=60)
        log.wait_ready()
        assert not list(Path({str(tmp_path)!r}).rglob("*.parquet"))  # the warm-up wrote nothing to disk
        start = time.process_time_ns()
        for i in range(100):
            log.request(request_row(log, i))
        log.flush()
        first = time.process_time_ns() - start
        log.close()
        print(log.warmup_cpu_ns, first, log.rows_written["requests"])
        """
    )
    out = subprocess.run([sys.executable, "-c", script], check=True, timeout=120, capture_output=True, text=True)
    warmup_ns, first_ns, written = map(int, out.stdout.split())
    assert written == 100
    assert warmup_ns > 0
    assert first_ns < warmup_ns / 3, (first_ns, warmup_ns)


# -- a disk that refuses writes -----------------------------------------------------------------------------------


class RefusingDisk:
    """``eventlog.write_parquet`` that fails with ENOSPC while ``full`` is set (the file layer, as a full disk)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = True
        self.refused = 0
        real = eventlog.write_parquet

        def write(path: Path, table: Any) -> None:
            if self.full:
                self.refused += 1
                path.write_bytes(b"PAR1 partial")  # a partial temporary file, as a real ENOSPC leaves
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            real(path, table)

        monkeypatch.setattr(eventlog, "write_parquet", write)


def seqs_on_disk(root: Path) -> list[int]:
    table = read_dataset(root, REQUESTS_DIR)
    return [] if table is None else sorted(table.column("seq").to_pylist())


def test_a_full_disk_keeps_rows_in_memory_and_writes_them_when_it_has_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    disk = RefusingDisk(monkeypatch)
    with EventLog(tmp_path, "gw", roll_rows=50, retry_seconds=0.05) as log:
        for i in range(120):
            log.request(request_row(log, i))  # the loop side never raises for a disk error: the gateway keeps serving
        with pytest.raises(EventLogError, match="could not be written yet"):
            log.flush()
        assert disk.refused >= 1 and log.write_errors >= 1
        assert log.rows_buffered == 120 and log.rows_written[REQUESTS_DIR] == 0
        metrics = {(s.name, s.tags): s.value for s in log.metric_samples(0)}
        assert metrics[("rows-buffered", ())] == 120
        assert metrics[("write-errors", ())] >= 1
        log.request(request_row(log, 120))
        disk.full = False
        log.flush()
        assert log.rows_buffered == 0
    assert seqs_on_disk(tmp_path) == list(range(121))
    assert log.rows_dropped[REQUESTS_DIR] == 0
    assert not [p for p in (tmp_path / REQUESTS_DIR).iterdir() if p.name.startswith(".")]  # no partial files left
    messages = [r.getMessage() for r in caplog.records]
    assert any("No space left on device" in m and "keeps serving" in m for m in messages)
    assert any("writing again" in m for m in messages)


def test_a_full_disk_beyond_the_memory_bound_drops_the_oldest_rows_and_counts_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    disk = RefusingDisk(monkeypatch)
    bound = 100_000  # bytes of Arrow data: a few files of 50 rows (~400 bytes a row here)
    log = EventLog(tmp_path, "gw", roll_rows=50, max_buffered_bytes=bound, retry_seconds=0.05)
    try:
        n = 1_000
        for i in range(n):
            log.request(request_row(log, i))
            if i % 50 == 49:
                with pytest.raises(EventLogError):
                    log.flush()
                assert sum(k.waiting_bytes() for k in log._kinds.values()) <= bound  # memory stays bounded
        dropped = log.rows_dropped[REQUESTS_DIR]
        assert 0 < dropped < n
        disk.full = False
        log.flush()
    finally:
        with pytest.raises(EventLogError, match=f"{dropped} row"):  # close says rows were lost
            log.close()
    # the newest rows are kept, contiguous up to the present; every row is either on disk or counted as dropped
    assert seqs_on_disk(tmp_path) == list(range(dropped, n))
    assert log.rows_written[REQUESTS_DIR] + dropped == n
    assert any("dropped 50 requests row(s) (seq 0..49)" in r.getMessage() for r in caplog.records)


def test_rows_the_disk_still_refuses_at_close_are_reported_not_silently_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    RefusingDisk(monkeypatch)
    log = EventLog(tmp_path, "gw", retry_seconds=0.05)
    for i in range(30):
        log.request(request_row(log, i))
    with pytest.raises(EventLogError, match="30 row"):
        log.close()
    assert log.rows_dropped[REQUESTS_DIR] == 30
    assert any("dropped 30 requests row(s) (seq 0..29)" in r.getMessage() for r in caplog.records)
    assert seqs_on_disk(tmp_path) == []


def test_rows_beyond_the_queue_bound_while_the_writer_is_stalled_are_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer stuck in a write (a hung disk) cannot take rows: the loop's queue keeps its newest
    ``max_queued_rows`` and the rest are counted as dropped, so memory stays bounded."""
    entered, release = threading.Event(), threading.Event()
    real = eventlog.write_parquet

    def stalled(path: Path, table: Any) -> None:
        entered.set()
        release.wait(30)
        real(path, table)

    monkeypatch.setattr(eventlog, "write_parquet", stalled)
    log = EventLog(tmp_path, "gw", max_queued_rows=100)
    log.request(request_row(log, 0))
    flusher = threading.Thread(target=log.flush)
    flusher.start()
    assert entered.wait(30)
    for i in range(1, 501):
        log.request(request_row(log, i))
    release.set()
    flusher.join(30)
    with pytest.raises(EventLogError, match="400 row"):
        log.close()
    assert log.rows_dropped[REQUESTS_DIR] == 400
    assert seqs_on_disk(tmp_path) == [0, *range(401, 501)]


def test_an_idle_log_sleeps_longer_than_its_batch_period(tmp_path: Path) -> None:
    """With few rows arriving the writer doubles its sleep up to ``idle_seconds``: an idle gateway does not wake
    it 20 times a second. (On a loaded machine wake-ups only come later, so the bound holds.)"""
    with EventLog(tmp_path, "gw", batch_seconds=0.05, idle_seconds=1.0) as log:
        log.wait_ready()
        before = log.wakeups
        time.sleep(2.0)
        idle_turns = log.wakeups - before
        log.request(request_row(log, 0))
        log.flush()
    assert idle_turns <= 8, idle_turns  # 0.05 + 0.1 + 0.2 + 0.4 + 0.8 + 1.0 s ...; a 50 ms timer would be 40
    assert seqs_on_disk(tmp_path) == [0]


def test_the_gateway_reads_the_memory_bound_from_its_config(tmp_path: Path) -> None:
    from quotaflow.core.errors import CommandError
    from quotaflow.gateway.server import EVENT_LOG_BUFFER_MAX_BYTES, Gateway

    def gateway(value: str) -> Gateway:
        props = tmp_path / "gw.properties"
        props.write_text(f"{EVENT_LOG_BUFFER_MAX_BYTES}={value}\n")
        return Gateway("127.0.0.1:9", {"PLAINTEXT": "127.0.0.1:0"}, tmp_path / "q.db", config_path=props,
                       event_log=tmp_path / "events")

    gw = gateway("1048576")
    try:
        assert gw.event_log_buffer_bytes == 1_048_576
    finally:
        gw.sasl.close()
        gw.store.close()
    for bad in ("0", "-5", "lots"):
        with pytest.raises(CommandError, match=f"Invalid value {bad} for configuration {EVENT_LOG_BUFFER_MAX_BYTES}"):
            gateway(bad)


PENDING_FORMS = forms(pending_module)


def _log_request(log: EventLog, form: Any, conn: SimpleNamespace, request: Any, response_bytes: int,
                 now_ms: int) -> None:
    """What the connection core does with each request it answered: ``form.request_row`` appended to the log's
    ``request_rows`` with the log's next ``seq``."""
    rows = log.request_rows
    rows.append(form.request_row(conn.broker, conn.listener, conn.principal, conn.client_ip, request, response_bytes,
                                 now_ms, rows.next_seq()))


@pytest.mark.parametrize("form", PENDING_FORMS)
def test_each_request_field_is_logged_in_its_own_column(tmp_path: Path, form: Any) -> None:
    """``pending.request_row`` builds the row by position: each field of the connection and the request lands in the
    column named for it (distinct values everywhere, so a value in another's place shows), in both forms."""
    from quotaflow.gateway.data.enforcement import RequestDecisions
    from quotaflow.gateway.wire.protocol import RequestHeader

    with EventLog(tmp_path / "events", "gw-a") as log:
        conn = SimpleNamespace(broker="gw-a-node-3", listener="SASL_SSL", principal="alice", client_ip="10.1.2.3")
        produce = form.Pending(RequestHeader(0, 9, 7, "app-1", 15), request_bytes=1111, received_ms=0,
                               thread_ns=2222, network_ns=3333, acks=-1, decisions=RequestDecisions(44, 55, 66, 77))
        sasl = form.Pending(RequestHeader(36, form.RAW_SASL, 8, None, 10), request_bytes=12, received_ms=0,
                            thread_ns=5, network_ns=6)
        _log_request(log, form, conn, produce, 4444, 1_700_000_000_123)
        _log_request(log, form, conn, sasl, 13, 1_700_000_000_124)
    table = read_dataset(tmp_path / "events", REQUESTS_DIR)
    assert table is not None
    who = {"broker": "gw-a-node-3", "listener": "SASL_SSL", "user": "alice", "client_ip": "10.1.2.3",
           "is_follower": False}
    assert table.sort_by("seq").to_pylist() == [
        {**who, "ts_ms": 1_700_000_000_123, "client_id": "app-1", "api_key": 0, "api_version": 9,
         "request_bytes": 1111, "response_bytes": 4444, "io_thread_ns": 2222, "network_thread_ns": 3333, "acks": -1,
         "seq": 0, "throttle_ms_produce": 44, "throttle_ms_fetch": 55, "throttle_ms_request": 66, "throttle_ms": 77},
        # a raw SASL token exchange: no client id, version 0 (not the pseudo version), no decisions
        {**who, "ts_ms": 1_700_000_000_124, "client_id": "", "api_key": 36, "api_version": 0, "request_bytes": 12,
         "response_bytes": 13, "io_thread_ns": 5, "network_thread_ns": 6, "acks": None, "seq": 1,
         "throttle_ms_produce": 0, "throttle_ms_fetch": 0, "throttle_ms_request": 0, "throttle_ms": 0},
    ]


@pytest.mark.parametrize("form", PENDING_FORMS)
def test_a_produce_with_acks_out_of_the_columns_range_does_not_stop_the_log(tmp_path: Path, form: Any) -> None:
    """The attack: ``acks`` is an int16 on the wire and an int8 column. A tenant's Produce with acks=1000 (which its
    broker refuses) must not make a row that stops the log, which would then refuse every client's next request.
    The row keeps what replay needs of acks (0 or not: KIP-124's exemption)."""
    from quotaflow.gateway.wire.protocol import RequestHeader

    with EventLog(tmp_path / "events", "gw") as log:
        conn = SimpleNamespace(broker="gw", listener="PLAINTEXT", principal="mallory", client_ip="10.6.6.6")
        for i, acks in enumerate((1000, -32768, 32767, 128, -129, 0, -1, 1)):
            request = form.Pending(RequestHeader(0, 9, i, "evil", 14), 100, 0, acks=acks)
            _log_request(log, form, conn, request, 10, 1_700_000_000_000)
        log.flush()
        _log_request(log, form, conn, form.Pending(RequestHeader(0, 9, 99, "next", 14), 100, 0, acks=1), 10,
                     1_700_000_000_001)
    table = read_dataset(tmp_path / "events", REQUESTS_DIR)
    assert table is not None
    assert table.sort_by("seq").column("acks").to_pylist() == [127, -128, 127, 127, -128, 0, -1, 1, 1]
