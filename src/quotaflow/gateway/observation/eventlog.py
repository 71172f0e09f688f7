"""The gateway's usage event log: every request and connection decision, as rolling Parquet files.

The event loop only appends the row to a bounded deque, one compiled ``RowQueue`` per kind (:mod:`.row_queue`;
:attr:`EventLog.request_rows`, :meth:`EventLog.connection`): no lock, no queue, no wake-up. A request row is one tuple
in :data:`REQUEST_LOG_SCHEMA`'s column order (:data:`RequestRow`), built by the caller in one expression with its
``seq`` from :attr:`EventLog.next_seq` (the connection core builds it in C: ``pending.request_row``): a dict of 19 keys
cost 2.3x as much to build and append, and 1.6x as much CPU in the writer (bench/eventlog_rows.py). The rare connection
and authorization rows are dicts. One writer thread wakes on a timer (every ``batch_seconds``, 50 ms), takes everything
appended since, turns it into Arrow record batches (per 4,096 rows or per file: request tuples as one struct array,
converted by Arrow's C++ in one pass; dicts with ``from_pylist``) and writes ``DIR/requests/*.parquet`` and
``DIR/connections/*.parquet`` in the schema of :mod:`quotaflow.events` plus the decision columns, so the Spark jobs read
exactly what the gateway saw. The first Arrow conversion and Parquet write in a process cost a third of a second of CPU;
the writer does both once on dummy rows at start (:meth:`EventLog.wait_ready`), so the gateway serves its first request
already warm.

A file is written under a hidden temporary name (``.part-….parquet.tmp``, skipped by :func:`events.dataset_files`
and by Spark's file sources, which ignore names starting with ``.``), fsynced, then renamed: a reader never sees a
partial file, a crash loses at most the rows not yet rolled, and :meth:`EventLog.close` writes everything appended
(the gateway closes it on SIGINT / SIGTERM; an ``atexit`` hook covers an interpreter that exits without close).

When a file cannot be written (a full disk, a quota, an I/O error: any ``OSError``) the gateway keeps serving: the
rows stay in memory as Arrow tables, the writes are retried every ``retry_seconds``, and the first failure, every
drop and the recovery are logged at ERROR / WARNING. Memory stays bounded: rows waiting for the disk are kept up to
``max_buffered_bytes`` of Arrow data; beyond it the *oldest* waiting rows are dropped (the newest are kept, so once
the disk has room the log continues without a gap up to the present), counted in :attr:`EventLog.rows_dropped` and
``/metrics`` (``kafka_server_event_log_rows_dropped``) and logged with their ``seq`` range. Rows not yet taken by
the writer are bounded by ``max_queued_rows`` (only reachable if the writer thread is stalled, e.g. a hung
``fsync``); beyond it the oldest are dropped and counted likewise. A row that breaks the schema (a null in a
required column, a tuple of another length) is a bug in the caller, not an outage: it stops the log and is raised on
the next call.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from quotaflow.core.errors import QuotaflowError
from quotaflow.engine.metrics import MetricSample
from quotaflow.events import (
    AUTHORIZATION_SCHEMA,
    AUTHORIZATIONS_DIR,
    CONNECTION_DECISION_FIELDS,
    CONNECTION_SCHEMA,
    CONNECTIONS_DIR,
    REQUEST_DECISION_FIELDS,
    REQUEST_SCHEMA,
    REQUESTS_DIR,
    SHADOW_CONNECTION_FIELDS,
    SHADOW_REQUEST_FIELDS,
)
from quotaflow.gateway.observation.row_queue import RowQueue

log = logging.getLogger(__name__)

REQUEST_LOG_SCHEMA: Final = pa.schema([*REQUEST_SCHEMA, *REQUEST_DECISION_FIELDS])
"""What the gateway writes for a request: the event schema plus its throttle decisions."""
RequestRow: TypeAlias = tuple[int, str, str, str, str, str, int, int, int, int, int, int, int | None, bool, int,
                              int, int, int, int]
"""One request row for :meth:`EventLog.request`: the values of :data:`REQUEST_LOG_SCHEMA`'s columns in its order
(``ts_ms, broker, listener, user, client_id, client_ip, api_key, api_version, request_bytes, response_bytes,
io_thread_ns, network_thread_ns, acks, is_follower, seq, throttle_ms_produce, throttle_ms_fetch,
throttle_ms_request, throttle_ms``)."""
SHADOW_REQUEST_LOG_SCHEMA: Final = pa.schema([*REQUEST_LOG_SCHEMA, *SHADOW_REQUEST_FIELDS])
"""What the gateway writes for a request while a shadow quota set runs (:data:`ShadowRequestRow`): files of their
own in the same ``requests/`` directory, so a gateway without a shadow writes exactly what it always did (readers
concatenate the files with ``promote_options="permissive"``: the shadow columns are null in the other files)."""
ShadowRequestRow: TypeAlias = tuple[int, str, str, str, str, str, int, int, int, int, int, int, int | None, bool, int,
                                    int, int, int, int, int, int, int, int, int]
"""A :data:`RequestRow` followed by ``shadow_id, shadow_throttle_ms_produce, shadow_throttle_ms_fetch,
shadow_throttle_ms_request, shadow_throttle_ms``."""
CONNECTION_LOG_SCHEMA: Final = pa.schema([*CONNECTION_SCHEMA, *CONNECTION_DECISION_FIELDS, *SHADOW_CONNECTION_FIELDS])
"""What the gateway writes for a connection attempt: the event schema plus the admission decision, and the one the
shadow set would have made (null while none runs; connection rows are few, their null columns cost nothing)."""

_SCHEMAS: Final = {REQUESTS_DIR: REQUEST_LOG_SCHEMA, CONNECTIONS_DIR: CONNECTION_LOG_SCHEMA,
                   AUTHORIZATIONS_DIR: AUTHORIZATION_SCHEMA}
SHADOW_REQUESTS: Final = "requests-shadow"
"""The kind (``/metrics`` tag) of request rows decided under a shadow set; written to ``requests/``."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")

BATCH_SECONDS: Final = 0.05
"""How often the writer takes the rows appended since its last turn while many arrive (its only wake-up)."""
IDLE_SECONDS: Final = 1.0
"""The longest the writer sleeps while few rows arrive: a turn costs ~0.1 ms of CPU on a slow core, so 20 turns a
second would cost more than the rows themselves at a few hundred requests a second."""
BUSY_ROWS: Final = 1024
"""A turn that takes at least this many rows keeps the writer on ``batch_seconds``; fewer double its sleep."""
BATCH_ROWS: Final = 4096
"""Rows per Arrow conversion: amortizes its fixed cost, bounds how long the writer holds the GIL in one C call
(~2 ms for request tuples, ~4 ms for dicts) and the rows the writer holds (~2 MB of request tuples)."""
MAX_BUFFERED_BYTES: Final = 64 * 1024 * 1024
"""Default bound on Arrow data waiting for the disk (~100 bytes a request row: ~600,000 rows)."""
MAX_QUEUED_ROWS: Final = 200_000
"""Default bound on rows not yet taken by the writer (~0.4 KB a request tuple); only reached if the writer is
stalled."""
RETRY_SECONDS: Final = 1.0
"""How often files that failed to write are retried."""


def write_table(table: pa.Table, where: Any) -> None:
    """Parquet-encode ``table`` into ``where`` (a file or an Arrow stream), dictionary-encoding its string columns
    only. Those repeat (broker, listener, principal, client id, address); the int64 columns (timestamps, sequence
    numbers, sizes, thread times) hardly ever do, and Parquet's default dictionary for them is a hash table grown
    row by row in memory the allocator has given back since the last file. Under one-at-a-time Produce traffic that
    was half the writer thread's CPU and 2 % of the gateway's (perf); without it files are ~3 % larger."""
    strings = [f.name for f in table.schema if pa.types.is_string(f.type)]
    pq.write_table(table, where, use_dictionary=strings)


def write_parquet(path: Path, table: pa.Table) -> None:
    """Write ``table`` to ``path`` and fsync it (the file layer; tests replace it to inject I/O errors)."""
    with open(path, "wb") as f:
        write_table(table, f)
        f.flush()
        os.fsync(f.fileno())


class EventLogError(QuotaflowError):
    """The event log was used after close, its writer failed on a bad row, or rows could not be written."""


class _Kind:
    """One kind of row: the loop's deque, the writer's batches not yet in a file, and tables the disk refused."""

    def __init__(self, name: str, schema: pa.Schema, max_queued_rows: int, next_seq: Callable[[], int], *,
                 tuples: bool = False, directory: str | None = None) -> None:
        self.name = name
        self.directory = directory or name
        self.schema = schema
        self.required = [i for i, f in enumerate(schema) if not f.nullable]
        # rows are tuples in the schema's column order (converted as one struct array), else dicts by column name
        self.row_type = pa.struct(list(schema)) if tuples else None
        self.queue = RowQueue(max_queued_rows, next_seq)  # appended by the loop, taken by the writer
        self.taken = 0  # writer side
        self.rows: list[Any] = []  # taken from the queue, not converted yet (< BATCH_ROWS)
        self.batches: list[pa.RecordBatch] = []  # converted rows of the file being filled
        self.batch_rows = 0
        self.first_at = 0.0  # monotonic time the current file got its first row
        self.failed: deque[pa.Table] = deque()  # whole files waiting for the disk, oldest first
        self.failed_rows = 0
        self.rows_written = 0
        self.files_written = 0
        self.rows_dropped = 0

    @property
    def pending(self) -> int:
        """Rows of the file being filled."""
        return self.batch_rows + len(self.rows)

    def waiting_bytes(self) -> int:
        return sum(int(t.nbytes) for t in self.failed) + sum(int(b.nbytes) for b in self.batches)


class EventLog:
    """Append-only usage events for one broker (gateway) name, written off the event loop.

    Request rows are :data:`RequestRow` tuples, complete: their ``seq`` is a call of :attr:`next_seq`, the log's
    arrival counter (one counter over every kind). Connection and authorization rows are dicts with the column names
    of :data:`CONNECTION_LOG_SCHEMA` / :data:`~quotaflow.events.AUTHORIZATION_SCHEMA`; their ``broker`` defaults to
    this log's broker and ``seq`` to :attr:`next_seq`, so the caller needs to fill neither. A file is rolled every
    ``roll_rows`` rows or ``roll_seconds`` after the writer took its first row (at most ``idle_seconds`` after it was
    appended). A new kind of row is a directory and schema in ``_SCHEMAS`` and a method like :meth:`connection` that
    calls ``self._put(self._kinds[DIR], row)``.
    """

    def __init__(
        self,
        directory: Path | str,
        broker: str,
        *,
        roll_rows: int = 50_000,
        roll_seconds: float = 5.0,
        batch_seconds: float = BATCH_SECONDS,
        idle_seconds: float = IDLE_SECONDS,
        max_buffered_bytes: int = MAX_BUFFERED_BYTES,
        max_queued_rows: int = MAX_QUEUED_ROWS,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        if roll_rows < 1 or roll_seconds <= 0 or batch_seconds <= 0 or retry_seconds <= 0:
            raise ValueError("roll_rows must be >= 1; roll_seconds, batch_seconds and retry_seconds > 0")
        if idle_seconds < batch_seconds:
            raise ValueError("idle_seconds must be >= batch_seconds")
        if max_buffered_bytes < 1 or max_queued_rows < 1:
            raise ValueError("max_buffered_bytes and max_queued_rows must be >= 1")
        self.directory = Path(directory)
        self.broker = broker
        self.roll_rows = roll_rows
        self.roll_seconds = roll_seconds
        self.batch_seconds = batch_seconds
        self.idle_seconds = idle_seconds
        self.max_buffered_bytes = max_buffered_bytes
        self.retry_seconds = retry_seconds
        for kind in _SCHEMAS:
            (self.directory / kind).mkdir(parents=True, exist_ok=True)
        self.next_seq: Final[Callable[[], int]] = itertools.count().__next__
        """The arrival counter: the next ``seq`` (a C call, for a request row built inline on the loop)."""
        self._kinds = {name: _Kind(name, schema, max_queued_rows, self.next_seq, tuples=name == REQUESTS_DIR)
                       for name, schema in _SCHEMAS.items()}
        self._kinds[SHADOW_REQUESTS] = _Kind(SHADOW_REQUESTS, SHADOW_REQUEST_LOG_SCHEMA, max_queued_rows,
                                             self.next_seq, tuples=True, directory=REQUESTS_DIR)
        self._requests = self._kinds[REQUESTS_DIR]
        self.request_rows: Final[RowQueue] = self._requests.queue
        """Where the loop appends :data:`RequestRow` tuples (what :meth:`request` does, as C calls only)."""
        self.shadow_request_rows: Final[RowQueue] = self._kinds[SHADOW_REQUESTS].queue
        """Where the loop appends :data:`ShadowRequestRow` tuples while a shadow quota set runs (the gateway
        points its ``request_rows`` here for exactly that long)."""
        self._connections = self._kinds[CONNECTIONS_DIR]
        self._authorizations = self._kinds[AUTHORIZATIONS_DIR]
        self._refusal: str | None = None  # set once closed or failed (_refuse): the loop side's only check
        self._error: BaseException | None = None  # a bad row: fatal
        self._stopping = False
        self._wake = threading.Event()  # set by flush / close only, never per row
        self._flushes: list[threading.Event] = []
        self._flush_lock = threading.Lock()
        self._ready = threading.Event()
        self._files = itertools.count()
        self.wakeups = 0  # writer turns (timer ticks, flushes, close): for tests and metrics
        self.write_errors = 0  # files the disk refused (each retry counts)
        self.warmup_cpu_ns = 0  # the writer thread's CPU time for the pyarrow warm-up
        self._failing_since: float | None = None
        self._next_retry = 0.0
        self._thread = threading.Thread(target=self._run, name=f"quotaflow-eventlog-{broker}", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)

    # -- event-loop side: an append, never blocks, never wakes the writer ------------------------------------
    def request(self, row: RequestRow) -> None:
        """Log one request event: a :data:`RequestRow`, its ``seq`` from :attr:`next_seq`. A row that breaks the
        schema (a ``None`` in a required column, a value out of its column's range, a tuple of another length) stops
        the log (:class:`EventLogError` on the next call): it is a bug in the caller, checked by the writer."""
        self.request_rows.append(row)  # a full deque drops its oldest (counted by the writer)

    def connection(self, row: dict[str, Any]) -> None:
        """Log one connection-decision event. The dict belongs to the log from now on."""
        self._put(self._connections, row)

    def authorization(self, row: dict[str, Any]) -> None:
        """Log one authorization decision (:data:`quotaflow.events.AUTHORIZATION_SCHEMA`)."""
        self._put(self._authorizations, row)

    def _put(self, kind: _Kind, row: dict[str, Any]) -> None:
        if "broker" not in row:
            row["broker"] = self.broker
        if row.get("seq") is None:
            row["seq"] = self.next_seq()
        kind.queue.append(row)  # a full deque drops its oldest (counted by the writer)

    # -- counters ----------------------------------------------------------------------------------------------
    @property
    def rows_written(self) -> dict[str, int]:
        return {name: k.rows_written for name, k in self._kinds.items()}

    @property
    def files_written(self) -> dict[str, int]:
        return {name: k.files_written for name, k in self._kinds.items()}

    @property
    def rows_dropped(self) -> dict[str, int]:
        return {name: k.rows_dropped for name, k in self._kinds.items()}

    @property
    def rows_buffered(self) -> int:
        """Rows appended and not yet in a file (a snapshot: rows keep arriving)."""
        return sum(len(k.queue.rows) + k.pending + k.failed_rows for k in self._kinds.values())

    def metric_samples(self, now_ms: int) -> Iterable[MetricSample]:
        """``/metrics``: rows written / dropped per kind, rows waiting, write errors (group ``EventLog``)."""
        for name, k in self._kinds.items():
            tags = (("kind", name),)
            yield MetricSample("rows-written", "EventLog", tags, k.rows_written, "rows written to Parquet files")
            yield MetricSample("rows-dropped", "EventLog", tags, k.rows_dropped,
                               "rows lost: refused by the disk beyond the memory bound, or not taken by a stalled "
                               "writer")
        yield MetricSample("rows-buffered", "EventLog", (), self.rows_buffered, "rows in memory, not yet in a file")
        yield MetricSample("write-errors", "EventLog", (), self.write_errors, "Parquet writes that failed")

    # -- control -----------------------------------------------------------------------------------------------
    def wait_ready(self, timeout: float | None = 60.0) -> None:
        """Block until the writer has warmed pyarrow (its first conversion and Parquet write are slow)."""
        if not self._ready.wait(timeout):
            raise EventLogError(f"event log writer did not warm up within {timeout}s")
        self._raise_error()

    def flush(self, timeout: float | None = 30.0) -> None:
        """Write every row appended so far into complete files before returning (blocks; not for the event loop).
        Raises :class:`EventLogError` if the disk refused some of them (they stay buffered and are retried)."""
        if self._stopping:
            return
        done = threading.Event()
        with self._flush_lock:
            self._flushes.append(done)
        self._wake.set()
        if not done.wait(timeout):
            raise EventLogError(f"event log flush did not finish within {timeout}s")
        self._raise_error()
        waiting = sum(k.failed_rows for k in self._kinds.values())
        if waiting:
            raise EventLogError(f"event log: {waiting} row(s) could not be written yet (kept in memory, retried)")

    def close(self, timeout: float | None = 60.0) -> None:
        """Write everything appended, stop the writer thread. Idempotent. Raises :class:`EventLogError` if rows
        could not be written (they are counted in :attr:`rows_dropped` and logged)."""
        if self._stopping:
            return
        self._stopping = True
        self._refuse("event log is closed")
        atexit.unregister(self._at_exit)
        self._wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise EventLogError(f"event log writer did not stop within {timeout}s")
        self._raise_error()
        lost = sum(k.rows_dropped for k in self._kinds.values())
        if lost:
            raise EventLogError(f"event log: {lost} row(s) were dropped, see the log for their seq ranges")

    def _at_exit(self) -> None:
        try:
            self.close(timeout=30)
        except EventLogError as e:
            log.error("event log at exit: %s", e)

    def _refuse(self, why: str) -> None:
        """From now on every append raises ``why`` (:meth:`_raise_refusal`), on every kind's queue."""
        self._refusal = why
        for kind in self._kinds.values():
            kind.queue.refusal = self._raise_refusal

    def _raise_refusal(self) -> None:
        raise EventLogError(self._refusal) from self._error

    def _raise_error(self) -> None:
        if self._error is not None:
            raise EventLogError(f"event log writer failed: {self._error}") from self._error

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writer thread -----------------------------------------------------------------------------------------
    def _run(self) -> None:
        start = time.thread_time_ns()
        try:
            self._warm_up()
        except Exception as e:
            log.exception("event log: pyarrow warm-up failed")
            self._fail(e)
        self.warmup_cpu_ns = time.thread_time_ns() - start
        self._ready.set()
        period = self.batch_seconds
        while True:
            self._wake.wait(self._sleep(period))
            self._wake.clear()
            self.wakeups += 1
            closing = self._stopping
            with self._flush_lock:
                flushes, self._flushes = self._flushes, []
            if self._error is None:
                try:
                    taken = sum(k.taken for k in self._kinds.values())
                    self._turn(flush=closing or bool(flushes), closing=closing)
                    busy = sum(k.taken for k in self._kinds.values()) - taken >= BUSY_ROWS
                    period = self.batch_seconds if busy else min(period * 2, self.idle_seconds)
                except Exception as e:  # a bad row or an Arrow error: fatal, raised to the caller
                    log.exception("event log writer failed")
                    self._fail(e)
            for done in flushes:
                done.set()
            if closing:
                return

    def _sleep(self, period: float) -> float:
        """``period``, or less when a file is due to roll or a refused write to be retried before it ends."""
        now = time.monotonic()
        due = [k.first_at + self.roll_seconds for k in self._kinds.values() if k.pending]
        if self._failing_since is not None:
            due.append(self._next_retry)
        return max(0.0, min([period, *(d - now for d in due)]))

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
            self._refuse(f"event log writer failed: {error}")

    def _warm_up(self) -> None:
        """One dummy row of each kind through the whole path (convert, concatenate, slice, Parquet) in memory."""
        for kind in self._kinds.values():
            values = [_zero(f.type) for f in kind.schema]
            row = tuple(values) if kind.row_type is not None else dict(zip(kind.schema.names, values, strict=True))
            batch = self._convert(kind, [row, row])
            table = pa.Table.from_batches([batch, batch]).slice(0, 3)
            sink = pa.BufferOutputStream()
            write_table(table, sink)
            if pq.read_table(pa.BufferReader(sink.getvalue())).num_rows != 3:
                raise EventLogError("pyarrow warm-up read back the wrong number of rows")

    def _turn(self, *, flush: bool, closing: bool) -> None:
        now = time.monotonic()
        for kind in self._kinds.values():
            self._take(kind, now)
            if kind.pending and (flush or now - kind.first_at >= self.roll_seconds):
                self._roll(kind)
        if self._failing_since is not None and (flush or now >= self._next_retry):
            self._retry(closing=closing)
        self._bound()

    def _take(self, kind: _Kind, now: float) -> None:
        """Move everything appended to the writer's side, converting every ``BATCH_ROWS`` rows (a conversion has a
        fixed cost of ~100 µs: once per 50 ms turn it would cost more than the rows) and rolling a file at every
        ``roll_rows``."""
        queue = kind.queue.rows
        rows, pop = kind.rows, queue.popleft
        while queue:
            n = min(len(queue), self.roll_rows - kind.pending)
            if not kind.pending:
                kind.first_at = now
            rows.extend(itertools.starmap(pop, itertools.repeat((), n)))  # n pops in C: 10 ns a row, not 30
            kind.taken += n
            if len(rows) >= BATCH_ROWS:
                self._convert_rows(kind)
            if kind.pending >= self.roll_rows:
                self._roll(kind)
        dropped = kind.queue.appended - kind.taken - len(queue)  # a full deque dropped its oldest rows
        if dropped > 0:
            kind.taken += dropped
            self._dropped(kind, dropped, "rows arrived faster than the writer took them")

    def _convert_rows(self, kind: _Kind) -> None:
        """The writer's rows into record batches of at most ``BATCH_ROWS`` (each one C call holding the GIL)."""
        rows = kind.rows
        for start in range(0, len(rows), BATCH_ROWS):
            chunk = rows[start:start + BATCH_ROWS]
            kind.batches.append(self._convert(kind, chunk))
            kind.batch_rows += len(chunk)
        rows.clear()

    @staticmethod
    def _convert(kind: _Kind, rows: list[Any]) -> pa.RecordBatch:
        try:
            if kind.row_type is not None:  # tuples: one C loop over rows and values, no per-column Python transpose
                batch = pa.RecordBatch.from_struct_array(pa.array(rows, type=kind.row_type))
            else:
                batch = pa.RecordBatch.from_pylist(rows, schema=kind.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:  # a tuple of another length, a value of the wrong type
            shape = f"tuples of {len(kind.schema)} values" if kind.row_type is not None else "dicts"
            raise EventLogError(f"a {kind.name} row does not fit its schema ({shape}: "
                                f"{', '.join(kind.schema.names)}): {e}") from e
        for i in kind.required:
            if batch.column(i).null_count:
                raise EventLogError(f"{batch.column(i).null_count} row(s) without a value for required column "
                                    f"{kind.schema.field(i).name}")
        return batch

    def _roll(self, kind: _Kind) -> None:
        self._convert_rows(kind)
        table = pa.Table.from_batches(kind.batches, schema=kind.schema)
        kind.batches, kind.batch_rows = [], 0
        # while the disk refuses, new files wait behind the older ones (retried in order, not on every roll)
        if kind.failed or not self._write(kind, table):
            kind.failed.append(table)
            kind.failed_rows += table.num_rows

    def _write(self, kind: _Kind, table: pa.Table) -> bool:
        ts, seq = table.column("ts_ms")[0].as_py(), table.column("seq")[0].as_py()
        name = f"part-{ts:013d}-{_UNSAFE.sub('_', self.broker)}-{seq:012d}-{next(self._files)}"
        final = self.directory / kind.directory / f"{name}.parquet"
        tmp = final.with_name(f".{name}.parquet.tmp")
        try:
            write_parquet(tmp, table)
            os.replace(tmp, final)
        except OSError as e:
            self.write_errors += 1
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            if self._failing_since is None:
                self._failing_since = time.monotonic()
                log.error("event log: cannot write %s (%s); the gateway keeps serving, rows are kept in memory (up "
                          "to %.1f MB) and the write is retried every %g s", final, e,
                          self.max_buffered_bytes / (1024 * 1024), self.retry_seconds)
            self._next_retry = time.monotonic() + self.retry_seconds
            return False
        kind.rows_written += table.num_rows
        kind.files_written += 1
        return True

    def _retry(self, *, closing: bool) -> None:
        """Write the waiting files, oldest first; at close, try a few times more, then drop (and say so)."""
        attempts = 3 if closing else 1
        for attempt in range(attempts):
            if attempt:
                time.sleep(min(self.retry_seconds, 1.0))
            for kind in self._kinds.values():
                while kind.failed and self._write(kind, kind.failed[0]):
                    kind.failed_rows -= kind.failed.popleft().num_rows
            if not any(k.failed for k in self._kinds.values()):
                assert self._failing_since is not None
                log.warning("event log: writing again after %.1f s of failures (%d failed writes)",
                            time.monotonic() - self._failing_since, self.write_errors)
                self._failing_since = None
                return
        if closing:
            for kind in self._kinds.values():
                while kind.failed:
                    self._drop_oldest(kind, "the disk still refused them at close")

    def _bound(self) -> None:
        """Drop the oldest rows waiting for the disk while they exceed ``max_buffered_bytes``."""
        while True:
            kinds = [k for k in self._kinds.values() if k.failed]
            if not kinds or sum(k.waiting_bytes() for k in self._kinds.values()) <= self.max_buffered_bytes:
                return
            oldest = min(kinds, key=lambda k: _seq_range(k.failed[0])[0])
            self._drop_oldest(oldest, f"more than {self.max_buffered_bytes} bytes were waiting for the disk")

    def _drop_oldest(self, kind: _Kind, why: str) -> None:
        table = kind.failed.popleft()
        kind.failed_rows -= table.num_rows
        self._dropped(kind, table.num_rows, why, _seq_range(table))

    def _dropped(self, kind: _Kind, rows: int, why: str, seqs: tuple[int, int] | None = None) -> None:
        kind.rows_dropped += rows
        where = f" (seq {seqs[0]}..{seqs[1]})" if seqs is not None else ""
        log.error("event log: dropped %d %s row(s)%s: %s; %d dropped so far", rows, kind.name, where, why,
                  kind.rows_dropped)


def _seq_range(table: pa.Table) -> tuple[int, int]:
    low, high = pc.min_max(table.column("seq")).values()
    return int(low.as_py()), int(high.as_py())


def _zero(t: pa.DataType) -> Any:
    if pa.types.is_string(t):
        return ""
    if pa.types.is_boolean(t):
        return False
    return 0
