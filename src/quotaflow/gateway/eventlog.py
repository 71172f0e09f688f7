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

_SCHEMAS: Final = {REQUESTS_DIR: REQUEST_LOG_SCHEMA, CONNECTIONS_DIR: CONNECTION_LOG_SCHEMA}
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
    def request(self, row: Mapping[str, Any]) -> None:
        """Queue one request event."""
        self._put(REQUESTS_DIR, row)

    def connection(self, row: Mapping[str, Any]) -> None:
        """Queue one connection-decision event."""
        self._put(CONNECTIONS_DIR, row)

    def _put(self, kind: str, row: Mapping[str, Any]) -> None:
        if self._closed:
            raise EventLogError("event log is closed")
        if self._error is not None:
            raise EventLogError(f"event log writer failed: {self._error}") from self._error
        full = dict(row)
        full.setdefault("broker", self.broker)
        if full.get("seq") is None:
            full["seq"] = next(self._seq)
        self._queue.put((kind, full))

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
    def _run(self) -> None:
        buffers: dict[str, list[dict[str, Any]]] = {kind: [] for kind in _SCHEMAS}
        first_at: dict[str, float] = {}
        while True:
            deadline = min(first_at.values(), default=None)
            timeout = None if deadline is None else max(0.0, deadline + self.roll_seconds - time.monotonic())
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                item = None
            if item is _STOP:
                self._write_all(buffers, first_at)
                return
            if isinstance(item, _Flush):
                self._write_all(buffers, first_at)
                item.done.set()
                continue
            if isinstance(item, tuple):
                kind, row = item
                buf = buffers[kind]
                if not buf:
                    first_at[kind] = time.monotonic()
                buf.append(row)
                if len(buf) >= self.roll_rows:
                    self._write(kind, buffers, first_at)
            now = time.monotonic()
            for kind, start in list(first_at.items()):
                if now - start >= self.roll_seconds:
                    self._write(kind, buffers, first_at)

    def _write_all(self, buffers: dict[str, list[dict[str, Any]]], first_at: dict[str, float]) -> None:
        for kind in _SCHEMAS:
            self._write(kind, buffers, first_at)

    def _write(self, kind: str, buffers: dict[str, list[dict[str, Any]]], first_at: dict[str, float]) -> None:
        rows = buffers[kind]
        buffers[kind] = []
        first_at.pop(kind, None)
        if not rows or self._error is not None:
            return
        try:
            self._write_file(kind, rows)
        except Exception as e:  # surfaced to the caller on its next call, flush or close
            log.exception("event log: writing %d %s rows failed", len(rows), kind)
            self._error = e

    def _write_file(self, kind: str, rows: list[dict[str, Any]]) -> None:
        table = pa.Table.from_pylist(rows, schema=_SCHEMAS[kind])
        name = f"part-{rows[0]['ts_ms']:013d}-{_UNSAFE.sub('_', self.broker)}-{rows[0]['seq']:012d}-{next(self._files)}"
        final = self.directory / kind / f"{name}.parquet"
        tmp = final.with_name(f".{name}.parquet.tmp")
        with open(tmp, "wb") as f:
            pq.write_table(table, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        self.rows_written[kind] += len(rows)
        self.files_written[kind] += 1
