"""Where the event loop hands rows to the event log's writer: one bounded deque per kind of row, counted.

Compiled by Cython as an extension type (``row_queue.pxd``), so the connection core appends a request's row with C
calls only (the refusal check, the append, the count): as two Python frames (the gateway's row builder and
``EventLog.request``) the row cost 5 % of the gateway's CPU per one-at-a-time Produce (bench/gateway_cpu.py, paired
with the row switched off). This plain-Python source is its pure twin; ``COMPILED`` says which form was imported.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import cython

COMPILED: bool = cython.compiled
"""True when the Cython-compiled form of this module was imported."""


class RowQueue:
    """One kind of row on its way from the event loop to the writer thread.

    ``rows`` is bounded (``max_rows``): a full deque drops its oldest row, which the writer finds as ``appended``
    rows it never took and counts as dropped. ``next_seq`` is the log's arrival counter, shared by every kind (the
    ``seq`` column): a caller that builds a complete row takes its ``seq`` from it. ``refusal`` is None while rows
    are accepted; once the log is closed or its writer failed it is the callable that raises why, and
    :meth:`append` calls it instead of appending. Appends and the writer's pops are each atomic under the GIL."""

    rows: deque[Any]
    appended: int
    next_seq: Callable[[], int]
    refusal: Callable[[], None] | None
    if not cython.compiled:  # the pure twin: these fields and no others (compiled: row_queue.pxd's)
        __slots__ = tuple(__annotations__)

    def __init__(self, max_rows: int, next_seq: Callable[[], int]) -> None:
        self.rows = deque(maxlen=max_rows)
        self.appended = 0
        self.next_seq = next_seq
        self.refusal = None

    def append(self, row: Any) -> None:
        """Queue one row for the writer (never blocks, never wakes it); raises the log's refusal once it has one."""
        if self.refusal is not None:
            self.refusal()
        self.rows.append(row)
        self.appended += 1
