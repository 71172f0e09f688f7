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
"""

from __future__ import annotations

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
    _max: int
    _n: int  # samples appended so far (≤ samples + 1)
    _current: int
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
        self._max = samples + 1
        self._value = []
        self._start = []
        self._last = []
        self._n = 0
        self._current = 0

    # -- recording ---------------------------------------------------------------------------------------------
    def record(self, value: float, now_ms: int) -> None:
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

    def _append(self, now_ms: cython.longlong) -> None:
        self._value.append(0.0)
        self._start.append(now_ms)
        self._last.append(now_ms)
        self._n += 1

    # -- reading (purges: a read can change later results, as in Kafka) -------------------------------------------
    def purge(self, now_ms: int) -> None:
        """Reset every sample whose last event is at least ``samples * window`` old (start becomes ``now``)."""
        age: cython.longlong = self._purge_age
        last = self._last
        i: cython.Py_ssize_t
        for i in range(self._n):
            if now_ms - last[i] >= age:
                self._value[i] = 0.0
                self._start[i] = now_ms
                last[i] = now_ms

    def total(self, now_ms: int) -> float:
        """``WindowedSum.measure``: purge, then the sum over all samples in list order."""
        self.purge(now_ms)
        total: float = 0.0  # a C double when compiled
        for v in self._value:
            total += v
        return total

    def window_size(self, now_ms: int) -> int:
        """``Rate.windowSize``: elapsed since the oldest sample, padded to ``samples - 1`` whole windows, ≥ 1 ms."""
        self.purge(now_ms)
        if self._n == 0:
            self._append(now_ms)  # SampledStat.oldest creates a sample when there is none
        elapsed = now_ms - min(self._start)
        full = java_div(elapsed, self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

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
        arithmetic wraps as Java's longs do (the twin's Python ints would not, for times ~2^63 ms apart).
        ``tests/engine/test_rate.py`` holds this to ``record`` then ``measure``, in both forms."""
        self.last_record_ms = now_ms
        cur: cython.Py_ssize_t = self._current
        start: cython.longlong
        if not self._n:
            cur = self._roll(now_ms)
        else:
            start = self._start[cur]
            if now_ms - start >= self.window_ms:
                cur = self._roll(now_ms)
        values = self._value
        starts = self._start
        lasts = self._last
        recorded: cython.double = values[cur]
        values[cur] = recorded + value
        lasts[cur] = now_ms
        if self.bound is None:
            return 0
        bound: cython.double = self.bound
        # total(now) then window_size(now), read with one purge: one pass finds whether any sample is obsolete
        n: cython.Py_ssize_t = self._n
        i: cython.Py_ssize_t
        age: cython.longlong = self._purge_age
        last: cython.longlong
        for i in range(n):
            last = lasts[i]
            if now_ms - last >= age:  # some sample is obsolete: reset them (rare on busy ids)
                self.purge(now_ms)
                break
        total: cython.double = 0.0
        oldest: cython.longlong = starts[0]
        for i in range(n):  # list order, plain double additions, as WindowedSum.combine
            sample: cython.double = values[i]
            total += sample
            start = starts[i]
            if start < oldest:
                oldest = start
        window: cython.longlong = now_ms - oldest
        window_ms: cython.longlong = self.window_ms
        full: cython.longlong = window // window_ms if window >= 0 else java_div(window, window_ms)
        if full < self.samples - 1:
            window += (self.samples - 1 - full) * window_ms
        if window < 1:
            window = 1
        rate: cython.double = total / (window / 1000.0)
        if rate <= bound:
            return 0
        if max_ms is None:
            return throttle_time(rate, bound, window)
        return bounded_throttle_time(rate, bound, window, max_ms)

    def peek(self, now_ms: int) -> tuple[float, int]:
        """(total, window) as a quota check at ``now_ms`` would read them before its record, changing nothing (a
        purge would: it restarts samples), so a caller may look without moving any later decision."""
        age = self._purge_age
        total = 0.0
        oldest = now_ms
        for i in range(self._n):
            if now_ms - self._last[i] < age:  # else purged by the check: value 0, start now
                total += self._value[i]
                oldest = min(oldest, self._start[i])
        elapsed = now_ms - oldest
        full = java_div(elapsed, self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return total, max(elapsed, 1)

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
        return list(self._value), list(self._start), list(self._last), self._current

    def import_state(self, values: list[float], starts: list[int], lasts: list[int], current: int) -> None:
        """Replace the samples (the inverse of :meth:`export_state`)."""
        if not len(values) == len(starts) == len(lasts) <= self._max:
            raise ValueError("inconsistent or oversized sample state")
        self._value, self._start, self._last = list(values), list(starts), list(lasts)
        self._n = len(values)
        self._current = current
