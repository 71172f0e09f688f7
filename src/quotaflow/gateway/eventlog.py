"""The gateway's usage event log: every request and connection decision, as rolling Parquet files.

The event loop only puts a dict on a queue (:meth:`EventLog.request`, :meth:`EventLog.connection`); one writer
thread batches rows and writes ``DIR/requests/*.parquet`` and ``DIR/connections/*.parquet`` in the schema of
:mod:`quotaflow.events` plus the decision columns, so the Spark jobs read exactly what the gateway saw.

A file is written under a hidden temporary name (``.part-….parquet.tmp``, skipped by :func:`events.dataset_files`
and by Spark's file sources, which ignore names starting with ``.``), fsynced, then renamed: a reader never sees a
partial file, a crash loses at most the rows not yet rolled, and :meth:`EventLog.close` writes everything queued.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

from quotaflow.core.errors import QuotaflowError
from quotaflow.events import (
    AUTHORIZATION_SCHEMA,
    AUTHORIZATIONS_DIR,
    CONNECTION_DECISION_FIELDS,
    CONNECTION_SCHEMA,
    CONNECTIONS_DIR,
    REQUEST_DECISION_FIELDS,
    REQUEST_SCHEMA,
    REQUESTS_DIR,
)

log = logging.getLogger(__name__)

REQUEST_LOG_SCHEMA: Final = pa.schema([*REQUEST_SCHEMA, *REQUEST_DECISION_FIELDS])
"""What the gateway writes for a request: the event schema plus its throttle decisions."""
CONNECTION_LOG_SCHEMA: Final = pa.schema([*CONNECTION_SCHEMA, *CONNECTION_DECISION_FIELDS])
"""What the gateway writes for a connection attempt: the event schema plus the admission decision."""

_SCHEMAS: Final = {REQUESTS_DIR: REQUEST_LOG_SCHEMA, CONNECTIONS_DIR: CONNECTION_LOG_SCHEMA,
                   AUTHORIZATIONS_DIR: AUTHORIZATION_SCHEMA}
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class EventLogError(QuotaflowError):
    """The event log was used after close, or its writer thread failed (the first failure is re-raised)."""


class _Flush:
    """A marker on the queue: write every buffered row now, then set ``done``."""

    def __init__(self) -> None:
        self.done = threading.Event()


_STOP: Final = object()


class EventLog:
    """Append-only usage events for one broker (gateway) name, written off the event loop.

    Rows are dicts with the column names of :data:`REQUEST_LOG_SCHEMA` / :data:`CONNECTION_LOG_SCHEMA`; ``broker``
    defaults to this log's broker and ``seq`` to the log's arrival counter (one counter over both kinds), so the
    caller needs to fill neither. A file is rolled every ``roll_rows`` rows or ``roll_seconds`` after its first row.
    """

    def __init__(
        self, directory: Path | str, broker: str, *, roll_rows: int = 50_000, roll_seconds: float = 5.0
    ) -> None:
        if roll_rows < 1 or roll_seconds <= 0:
            raise ValueError("roll_rows must be >= 1 and roll_seconds > 0")
        self.directory = Path(directory)
        self.broker = broker
        self.roll_rows = roll_rows
        self.roll_seconds = roll_seconds
        for kind in _SCHEMAS:
            (self.directory / kind).mkdir(parents=True, exist_ok=True)
        self._seq = itertools.count()
        self._queue: queue.SimpleQueue[tuple[str, dict[str, Any]] | _Flush | object] = queue.SimpleQueue()
        self._closed = False
        self._error: BaseException | None = None
        self._files = itertools.count()
        self.rows_written: dict[str, int] = dict.fromkeys(_SCHEMAS, 0)
        self.files_written: dict[str, int] = dict.fromkeys(_SCHEMAS, 0)
        self._thread = threading.Thread(target=self._run, name=f"quotaflow-eventlog-{broker}", daemon=True)
        self._thread.start()

    # -- event-loop side: O(1), never blocks -------------------------------------------------------------------
    def request(self, row: dict[str, Any]) -> None:
        """Queue one request event. The dict belongs to the log from now on (it is not copied)."""
        self._put(REQUESTS_DIR, row)

    def connection(self, row: dict[str, Any]) -> None:
        """Queue one connection-decision event. The dict belongs to the log from now on."""
        self._put(CONNECTIONS_DIR, row)

    def authorization(self, row: dict[str, Any]) -> None:
        """Queue one authorization decision (:data:`quotaflow.events.AUTHORIZATION_SCHEMA`)."""
        self._put(AUTHORIZATIONS_DIR, row)

    def _put(self, kind: str, row: dict[str, Any]) -> None:
        if self._closed:
            raise EventLogError("event log is closed")
        if self._error is not None:
            raise EventLogError(f"event log writer failed: {self._error}") from self._error
        if "broker" not in row:
            row["broker"] = self.broker
        if row.get("seq") is None:
            row["seq"] = next(self._seq)
        self._queue.put((kind, row))

    # -- control -----------------------------------------------------------------------------------------------
    def flush(self, timeout: float | None = 30.0) -> None:
        """Write every row queued so far into complete files before returning (blocks; not for the event loop)."""
        if self._closed:
            return
        marker = _Flush()
        self._queue.put(marker)
        if not marker.done.wait(timeout):
            raise EventLogError(f"event log flush did not finish within {timeout}s")
        self._raise_error()

    def close(self, timeout: float | None = 60.0) -> None:
        """Write everything queued, stop the writer thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise EventLogError(f"event log writer did not stop within {timeout}s")
        self._raise_error()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise EventLogError(f"event log writer failed: {self._error}") from self._error

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writer thread -----------------------------------------------------------------------------------------
    # The writer shares the GIL with the event loop, so it keeps its Python work per row small (one append per
    # column; pyarrow's from_pylist costs ~10x more) and yields the GIL between chunks of rows.
    def _run(self) -> None:
        buffers = {kind: _Columns(schema) for kind, schema in _SCHEMAS.items()}
        pending: object = None  # taken from the queue, not handled yet
        while True:
            if pending is None:
                deadline = min((b.first_at for b in buffers.values() if b.rows), default=None)
                timeout = None if deadline is None else max(0.0, deadline + self.roll_seconds - time.monotonic())
                try:
                    pending = self._queue.get(timeout=timeout)
                except queue.Empty:
                    pending = None
            handled = 0
            while pending is not None and handled < _CHUNK:
                item, pending = pending, None
                if item is _STOP:
                    self._write_all(buffers)
                    return
                if isinstance(item, _Flush):
                    self._write_all(buffers)
                    item.done.set()
                elif isinstance(item, tuple):
                    kind, row = item
                    buf = buffers[kind]
                    buf.append(row)
                    if buf.rows >= self.roll_rows:
                        self._write(kind, buf)
                handled += 1
                try:
                    pending = self._queue.get_nowait()
                except queue.Empty:
                    pending = None
            now = time.monotonic()
            for kind, buf in buffers.items():
                if buf.rows and now - buf.first_at >= self.roll_seconds:
                    self._write(kind, buf)
            time.sleep(0)  # let the event loop have the GIL between chunks

    def _write_all(self, buffers: dict[str, _Columns]) -> None:
        for kind, buf in buffers.items():
            self._write(kind, buf)

    def _write(self, kind: str, buf: _Columns) -> None:
        if not buf.rows:
            return
        try:
            table = buf.take()
            if self._error is None:
                self._write_file(kind, table)
        except Exception as e:  # surfaced to the caller on its next call, flush or close
            log.exception("event log: writing %s rows failed", kind)
            if self._error is None:
                self._error = e

    def _write_file(self, kind: str, table: pa.Table) -> None:
        ts, seq = table.column("ts_ms")[0].as_py(), table.column("seq")[0].as_py()
        name = f"part-{ts:013d}-{_UNSAFE.sub('_', self.broker)}-{seq:012d}-{next(self._files)}"
        final = self.directory / kind / f"{name}.parquet"
        tmp = final.with_name(f".{name}.parquet.tmp")
        with open(tmp, "wb") as f:
            pq.write_table(table, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        self.rows_written[kind] += table.num_rows
        self.files_written[kind] += 1


_CHUNK: Final = 256  # rows handled per hold of the GIL


class _Columns:
    """Rows of one kind, accumulated column by column."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.names: list[str] = schema.names
        self.columns: list[list[Any]] = [[] for _ in self.names]
        self.rows = 0
        self.first_at = 0.0

    def append(self, row: Mapping[str, Any]) -> None:
        if not self.rows:
            self.first_at = time.monotonic()
        get = row.get
        for name, column in zip(self.names, self.columns, strict=True):
            column.append(get(name))
        self.rows += 1

    def take(self) -> pa.Table:
        """The buffered rows as a table (emptying the buffer); a null in a required column is an error."""
        columns, self.columns, self.rows = self.columns, [[] for _ in self.names], 0
        arrays = [pa.array(values, type=f.type) for values, f in zip(columns, self.schema, strict=True)]
        for array, f in zip(arrays, self.schema, strict=True):
            if not f.nullable and array.null_count:
                raise EventLogError(f"{array.null_count} row(s) without a value for required column {f.name}")
        return pa.Table.from_arrays(arrays, schema=self.schema)
