"""Kafka's windowed ``Rate`` over a ``WindowedSum``: one quota-id's samples and its quota check.

Kafka 3.8+ semantics: up to ``samples + 1`` samples (one overlapping), purge by each sample's last event time,
the window padded to ``samples - 1`` whole windows, at least 1 ms. One instance is the whole per-quota-id state;
time is always an argument. This is the single implementation the gateway, the CLIs and the pipeline's reference
path use; :mod:`quotaflow.engine.kernel` holds the array twin for bulk work, tested against this one, and
:mod:`quotaflow.engine.quota_utils` the throttle formulas both use.

Compiled by Cython as an extension type (``rate.pxd`` declares its fields), because its record-and-check runs for
every Produce and Fetch the gateway meters: as bytecode it was the largest Python frame left on the gateway's hot
path (4 % of its CPU in live ``perf``). This plain-Python source is its pure twin; ``COMPILED`` says which form was
imported. Python subclasses (:class:`~quotaflow.engine.sensors.RateSensor`, :class:`~quotaflow.engine.stats.Avg`)
override its ``def`` methods as usual.

How the samples are stored: ``samples + 1`` slots, allocated when the Rate is made, of which the first ``_n`` are in
use (Kafka's list appends up to that many, then reuses them in turn). Compiled, the three per-sample fields (value,
start time, last-event time) are C arrays in one block of memory the Rate owns (``rate.pxd``: a ``double`` and two
``long long`` arrays, freed with it), so a record and its check read and write plain numbers: no float or int object
is made per request and the check's pass over the samples reads one contiguous block, not 24 to 36 objects spread
over the heap (as Python lists, each record made a float, and that pass was most of the Rate's cost in ``perf``).
The twin keeps them in three preallocated Python lists of the same length, indexed the same way, so both forms run
the very same statements. Python code reads the samples through :meth:`Rate.export_state` (in Kafka's list order),
never the arrays; pickles and copies carry the configuration and that state (:meth:`Rate.__reduce__`).
"""

from __future__ import annotations

import sys
from typing import Any

import cython

from quotaflow.engine.quota_utils import bounded_throttle_time, java_div, throttle_time

COMPILED: bool = cython.compiled
"""True when the Cython-compiled form of this module was imported."""


class Rate:
    """One ``Rate(WindowedSum)`` metric with its ``MetricConfig`` (window, samples, upper-bound quota)."""

    samples: int
    window_ms: int
    bound: float | None  # None: no quota on this metric (recorded, never violated)
    last_record_ms: int  # when it was created or last recorded (Kafka's Sensor.lastRecordTime): owners expire by it
    _purge_age: int
    _max: int  # slots: samples + 1
    _n: int  # slots in use: samples appended so far (≤ _max)
    _current: int
    # per slot; compiled: C arrays (rate.pxd), in one block from _allocate, freed in __dealloc__
    _value: list[float]
    _start: list[int]
    _last: list[int]
    if not cython.compiled:  # the pure twin: these fields and no others (compiled: rate.pxd's)
        __slots__ = tuple(__annotations__)

    def __init__(self, samples: int, window_ms: int, bound: float | None = None, now_ms: int = 0) -> None:
        if samples < 1:
            raise ValueError("The number of samples must be at least 1.")
        self.samples = samples
        self.window_ms = window_ms
        self.bound = bound
        self.last_record_ms = now_ms
        self._purge_age = samples * window_ms
        self._allocate(samples + 1)
        self._n = 0
        self._current = 0

    def _allocate(self, slots: cython.Py_ssize_t) -> cython.int:
        """Storage for ``slots`` samples (the only allocation a Rate makes; any number of samples the config asks)."""
        if cython.compiled:
            size: cython.Py_ssize_t = cython.sizeof(cython.double) + 2 * cython.sizeof(cython.longlong)
            if slots > sys.maxsize // size:
                raise MemoryError(f"no room for {slots} samples")
            block = PyMem_Malloc(slots * size)  # type: ignore[name-defined]  # noqa: F821
            if not block:
                raise MemoryError
            PyMem_Free(self._value)  # type: ignore[name-defined]  # noqa: F821  (an earlier __init__'s; NULL: none)
            self._value = cython.cast(cython.p_double, block)
            self._start = cython.cast(cython.p_longlong, self._value + slots)
            self._last = self._start + slots
        else:
            self._value = [0.0] * slots
            self._start = [0] * slots
            self._last = [0] * slots
        self._max = slots
        self._n = 0
        return 0

    def __dealloc__(self) -> None:
        """Compiled: return the samples' block (the twin's lists are ordinary objects)."""
        if cython.compiled:
            PyMem_Free(self._value)  # type: ignore[name-defined]  # noqa: F821

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle and copy as configuration plus :meth:`export_state` (C arrays are no Python fields to carry), and a
        Python subclass's ``__dict__`` (``Avg``'s event counts), so a Spark task or a deepcopy carries a Rate whole."""
        config = (self.samples, self.window_ms, self.bound, self.last_record_ms)
        return _restore, (type(self), config, self.export_state()), getattr(self, "__dict__", None)

    # -- recording ---------------------------------------------------------------------------------------------
    def record(self, value: cython.double, now_ms: cython.longlong) -> None:
        """``SampledStat.record``: roll to the next sample when the current one is complete; never purges."""
        self.last_record_ms = now_ms
        cur: cython.Py_ssize_t = self._current
        if not self._n or now_ms - self._start[cur] >= self.window_ms:
            cur = self._roll(now_ms)
        self._value[cur] += value
        self._last[cur] = now_ms

    def _roll(self, now_ms: cython.longlong) -> cython.Py_ssize_t:
        """The sample a record at ``now_ms`` goes to when the current one is complete (or none exists yet): the
        next one, appended up to ``samples + 1``, then reused (reset to start at ``now_ms``)."""
        if self._n == 0:
            self._append(now_ms)
            self._current = 0
            if now_ms - self._start[0] < self.window_ms:
                return 0
        cur: cython.Py_ssize_t = (self._current + 1) % self._max
        self._current = cur
        if cur >= self._n:
            self._append(now_ms)
        else:
            self._value[cur] = 0.0
            self._start[cur] = now_ms
        return cur

    def _append(self, now_ms: cython.longlong) -> cython.int:
        """Put the next free slot in use, starting at ``now_ms`` (Kafka's list append)."""
        n: cython.Py_ssize_t = self._n
        if n >= self._max:  # only a Rate whose __init__ never ran (no slots): refuse rather than write nowhere
            raise TypeError("Rate has no sample storage: Rate.__init__ was not called")
        self._value[n] = 0.0
        self._start[n] = now_ms
        self._last[n] = now_ms
        self._n = n + 1
        return 0

    # -- reading (purges: a read can change later results, as in Kafka) -------------------------------------------
    def purge(self, now_ms: cython.longlong) -> None:
        """Reset every sample whose last event is at least ``samples * window`` old (start becomes ``now``)."""
        age: cython.longlong = self._purge_age
        i: cython.Py_ssize_t
        for i in range(self._n):
            if now_ms - self._last[i] >= age:
                self._value[i] = 0.0
                self._start[i] = now_ms
                self._last[i] = now_ms

    def total(self, now_ms: cython.longlong) -> float:
        """``WindowedSum.measure``: purge, then the sum over all samples in list order."""
        self.purge(now_ms)
        total: float = 0.0  # a C double when compiled
        i: cython.Py_ssize_t
        for i in range(self._n):
            total += self._value[i]
        return total

    def window_size(self, now_ms: cython.longlong) -> int:
        """``Rate.windowSize``: elapsed since the oldest sample, padded to ``samples - 1`` whole windows, ≥ 1 ms."""
        self.purge(now_ms)
        if self._n == 0:
            self._append(now_ms)  # SampledStat.oldest creates a sample when there is none
        oldest: cython.longlong = self._start[0]
        i: cython.Py_ssize_t
        for i in range(1, self._n):
            if self._start[i] < oldest:
                oldest = self._start[i]
        window: int = self._padded(now_ms - oldest)
        return window

    def _padded(self, elapsed: cython.longlong) -> cython.longlong:
        """``Rate.windowSize`` from the time elapsed since the oldest sample: padded to ``samples - 1`` whole
        windows, at least 1 ms (Java's truncating division; a plain C division when both are positive)."""
        window_ms: cython.longlong = self.window_ms
        full: cython.longlong = elapsed // window_ms if elapsed >= 0 and window_ms > 0 else java_div(elapsed, window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * window_ms
        return elapsed if elapsed > 1 else 1

    def measure(self, now_ms: int) -> float:
        """``Rate.measure`` in units per second."""
        total = self.total(now_ms)
        return total / (self.window_size(now_ms) / 1000.0)

    # -- quota ---------------------------------------------------------------------------------------------------
    def record_and_throttle(self, value: cython.double, now_ms: cython.longlong,
                            max_ms: Any = None) -> cython.longlong:  # max_ms: int | None (Any: rate.pxd's object)
        """Record with the quota check (``Sensor.record`` with checkQuotas); on violation ``throttleTime``
        (bounded by ``max_ms`` when given), else 0.

        The hot path of every per-request decision, so it makes no call it can avoid: :meth:`record`'s common case
        (the current sample still open) is written out here, its rolls shared (``_roll``), and the rate and the
        window come from one fused reading with one pass over the samples (the window a violation uses is the same,
        as Kafka reads it at the same timestamp). Compiled, every number here is a C double or long long, whose
        arithmetic wraps as Java's longs do (the twin's Python ints would not, for times ~2^63 ms apart), and the
        samples are C arrays: a check within quota makes no Python object at all.
        ``tests/engine/test_rate.py`` holds this to ``record`` then ``measure``, in both forms."""
        self.last_record_ms = now_ms
        cur: cython.Py_ssize_t = self._current
        if not self._n or now_ms - self._start[cur] >= self.window_ms:
            cur = self._roll(now_ms)
        self._value[cur] += value
        self._last[cur] = now_ms
        if self.bound is None:
            return 0
        bound: cython.double = self.bound
        # total(now) then window_size(now), read with one purge: one pass finds whether any sample is obsolete
        n: cython.Py_ssize_t = self._n
        i: cython.Py_ssize_t
        age: cython.longlong = self._purge_age
        for i in range(n):
            if now_ms - self._last[i] >= age:  # some sample is obsolete: reset them (rare on busy ids)
                self.purge(now_ms)
                break
        total: cython.double = 0.0
        oldest: cython.longlong = self._start[0]
        for i in range(n):  # list order, plain double additions, as WindowedSum.combine
            total += self._value[i]
            if self._start[i] < oldest:
                oldest = self._start[i]
        window: cython.longlong = self._padded(now_ms - oldest)
        rate: cython.double = total / (window / 1000.0)
        if rate <= bound:
            return 0
        if max_ms is None:
            return throttle_time(rate, bound, window)
        return bounded_throttle_time(rate, bound, window, max_ms)

    def peek(self, now_ms: cython.longlong) -> tuple[float, int]:
        """(total, window) as a quota check at ``now_ms`` would read them before its record, changing nothing (a
        purge would: it restarts samples), so a caller may look without moving any later decision."""
        age: cython.longlong = self._purge_age
        total: cython.double = 0.0
        oldest: cython.longlong = now_ms
        i: cython.Py_ssize_t
        for i in range(self._n):
            if now_ms - self._last[i] < age:  # else purged by the check: value 0, start now
                total += self._value[i]
                if self._start[i] < oldest:
                    oldest = self._start[i]
        return total, self._padded(now_ms - oldest)

    def reading(self, now_ms: int) -> tuple[float, int]:
        """(total, window) as the quota check reads them at ``now_ms`` (after its record)."""
        if self._n == 0:
            return 0.0, 1
        return self.total(now_ms), self.window_size(now_ms)  # the second purge finds nothing left to reset

    @property
    def num_samples(self) -> int:
        return self._n

    # -- state hand-off with the array kernel ------------------------------------------------------------------
    def export_state(self) -> tuple[list[float], list[int], list[int], int]:
        """(values, start times, last-event times, current index), in Kafka's list order."""
        n: cython.Py_ssize_t = self._n
        return ([self._value[i] for i in range(n)], [self._start[i] for i in range(n)],
                [self._last[i] for i in range(n)], self._current)

    def import_state(self, values: list[float], starts: list[int], lasts: list[int], current: int) -> None:
        """Replace the samples (the inverse of :meth:`export_state`)."""
        n: cython.Py_ssize_t = len(values)
        if not n == len(starts) == len(lasts) <= self._max:
            raise ValueError("inconsistent or oversized sample state")
        if not 0 <= current < max(n, 1):
            raise ValueError(f"current sample {current} outside the {n} samples")
        i: cython.Py_ssize_t
        for i in range(n):
            self._value[i] = float(values[i])
            self._start[i] = int(starts[i])
            self._last[i] = int(lasts[i])
        self._n = n
        self._current = current


def _restore(cls: type[Rate], config: tuple[int, int, float | None, int],
             state: tuple[list[float], list[int], list[int], int]) -> Rate:
    """Unpickle (:meth:`Rate.__reduce__`): a ``cls`` set up by ``Rate.__init__`` itself (a subclass's own
    ``__init__`` may take other arguments; its ``__dict__`` is pickle's state), then the samples."""
    rate = cls.__new__(cls)
    Rate.__init__(rate, *config)
    rate.import_state(*state)
    return rate
