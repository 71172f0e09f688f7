"""Kafka's windowed ``Rate`` over a ``WindowedSum`` and the throttle formulas of ``QuotaUtils``.

Kafka 3.8+ semantics: up to ``samples + 1`` samples (one overlapping), purge by each sample's last event time,
the window padded to ``samples - 1`` whole windows, at least 1 ms. One instance is the whole per-quota-id state;
time is always an argument. This is the single implementation the gateway, the CLIs and the pipeline's reference
path use; :mod:`quotaflow.engine.kernel` holds the array twin for bulk work, tested against this one.
"""

from __future__ import annotations

import math
from typing import Final

LONG_MAX: Final = 9223372036854775807
LONG_MIN: Final = -9223372036854775808


def java_round(x: float) -> int:
    """``Math.round(double)``: half-up, NaN → 0, saturating at the long range (``+Inf`` → ``Long.MAX_VALUE``)."""
    if math.isnan(x):
        return 0
    if x >= 9.223372036854775807e18:
        return LONG_MAX
    if x <= -9.223372036854775808e18:
        return LONG_MIN
    return math.floor(x + 0.5)


def to_int32(x: int) -> int:
    """Scala ``.toInt`` / Java ``(int)`` on a long: keep the low 32 bits, signed."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def java_div(a: int, b: int) -> int:
    """Java integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def throttle_time(value: float, bound: float, window_ms: int) -> int:
    """``QuotaUtils.throttleTime``: ``round((O - T) / T * W)``; a zero bound gives ``Long.MAX_VALUE`` as Java's
    ``x / 0.0 = +Infinity`` does."""
    if bound == 0.0:
        diff = value - bound
        return LONG_MAX if diff > 0 else (0 if diff == 0 or math.isnan(diff) else LONG_MIN)
    return java_round((value - bound) / bound * window_ms)


def bounded_throttle_time(value: float, bound: float, window_ms: int, max_ms: int) -> int:
    """``QuotaUtils.boundedThrottleTime``: ``min(throttleTime, max)``."""
    return min(throttle_time(value, bound, window_ms), max_ms)


def keeps_oversized_fetch(value: float, total: float, window_ms: int, bound: float, samples: int,
                          sample_ms: int) -> bool:
    """Whether a throttled consumer fetch keeps its bytes recorded and is delivered (quotaflow's one departure from
    Kafka, which always empties and un-records it): when the response is larger than the quota window can hold
    (``getMaxValueInQuotaWindow`` = ``bound × (samples − 1) × windowSeconds``; Kafka only sends one that large when
    a single record batch is, KIP-74), emptying it could never end, so it is delivered and throttled after, as a
    produce request is, but only when the consumer was within its quota before it (``(total − value) / window ≤
    bound``, read with the same total and window as the check), so a consumer over its quota still gets nothing
    until its rate is back within it, however many connections it opens. ``total`` and ``window_ms`` are the
    quota check's reading after recording ``value``; ``sample_ms`` is ``quota.window.size.seconds × 1000``. The
    Rate path (``throttle.fetch_throttle``) and the kernels' loops call this same function."""
    if not value > bound * (samples - 1) * (sample_ms // 1000):
        return False
    return (total - value) / (window_ms / 1000.0) <= bound


class Rate:
    """One ``Rate(WindowedSum)`` metric with its ``MetricConfig`` (window, samples, upper-bound quota)."""

    __slots__ = ("_current", "_last", "_max", "_n", "_purge_age", "_start", "_value", "bound", "last_record_ms",
                 "samples", "window_ms")

    def __init__(self, samples: int, window_ms: int, bound: float | None = None, now_ms: int = 0) -> None:
        if samples < 1:
            raise ValueError("The number of samples must be at least 1.")
        self.samples = samples
        self.window_ms = window_ms
        self.bound = bound  # None: no quota on this metric (recorded, never violated)
        # when it was created or last recorded (Kafka's Sensor.lastRecordTime): an owner expires idle ones by it
        self.last_record_ms = now_ms
        self._purge_age = samples * window_ms
        self._max = samples + 1
        self._value: list[float] = []
        self._start: list[int] = []
        self._last: list[int] = []
        self._n = 0  # samples appended so far (≤ samples + 1)
        self._current = 0

    # -- recording ---------------------------------------------------------------------------------------------
    def record(self, value: float, now_ms: int) -> None:
        """``SampledStat.record``: roll to the next sample when the current one is complete; never purges."""
        self.last_record_ms = now_ms
        cur = self._current
        if not self._n or now_ms - self._start[cur] >= self.window_ms:
            cur = self._roll(now_ms)
        self._value[cur] += value
        self._last[cur] = now_ms

    def _roll(self, now_ms: int) -> int:
        """The sample a record at ``now_ms`` goes to when the current one is complete (or none exists yet): the
        next one, appended up to ``samples + 1``, then reused (reset to start at ``now_ms``)."""
        if self._n == 0:
            self._append(now_ms)
            self._current = 0
            if now_ms - self._start[0] < self.window_ms:
                return 0
        cur = (self._current + 1) % self._max
        self._current = cur
        if cur >= self._n:
            self._append(now_ms)
        else:
            self._value[cur] = 0.0
            self._start[cur] = now_ms
        return cur

    def _append(self, now_ms: int) -> None:
        self._value.append(0.0)
        self._start.append(now_ms)
        self._last.append(now_ms)
        self._n += 1

    # -- reading (purges: a read can change later results, as in Kafka) -------------------------------------------
    def purge(self, now_ms: int) -> None:
        """Reset every sample whose last event is at least ``samples * window`` old (start becomes ``now``)."""
        age = self._purge_age
        last = self._last
        for i in range(self._n):
            if now_ms - last[i] >= age:
                self._value[i] = 0.0
                self._start[i] = now_ms
                last[i] = now_ms

    def total(self, now_ms: int) -> float:
        """``WindowedSum.measure``: purge, then the sum over all samples in list order."""
        self.purge(now_ms)
        total = 0.0
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
    def record_and_throttle(self, value: float, now_ms: int, max_ms: int | None = None) -> int:
        """Record with the quota check (``Sensor.record`` with checkQuotas); on violation ``throttleTime``
        (bounded by ``max_ms`` when given), else 0.

        The hot path of every per-request decision, so it makes no call it can avoid: :meth:`record`'s common case
        (the current sample still open) is written out here, its rolls shared (``_roll``), and the rate and the
        window come from one fused reading (the window a violation uses is the same, as Kafka reads it at the same
        timestamp). ``tests/engine/test_rate.py`` holds this to ``record`` then ``measure``."""
        self.last_record_ms = now_ms
        cur = self._current
        if not self._n or now_ms - self._start[cur] >= self.window_ms:
            cur = self._roll(now_ms)
        values, starts, lasts = self._value, self._start, self._last
        values[cur] += value
        lasts[cur] = now_ms
        bound = self.bound
        if bound is None:
            return 0
        # total(now) then window_size(now), read with one purge and C-level ``min`` scans
        if now_ms - min(lasts) >= self._purge_age:  # some sample is obsolete: reset it (rare on busy ids)
            self.purge(now_ms)
        total = 0.0
        for v in values:  # list order, plain double additions, as WindowedSum.combine
            total += v
        window = now_ms - min(starts)
        full = window // self.window_ms if window >= 0 else java_div(window, self.window_ms)
        if full < self.samples - 1:
            window += (self.samples - 1 - full) * self.window_ms
        if window < 1:
            window = 1
        rate = total / (window / 1000.0)
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
