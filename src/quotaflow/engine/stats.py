"""The other metrics-library stats quota managers use: ``Avg`` (throttle-time), ``CumulativeSum`` (queue-size).

``Avg`` is a sampled stat with exactly ``Rate``'s windowing (samples + 1, purge by last event) whose reading is
sum / event count over the kept samples, NaN when there are no events (Kafka's ``Avg.combine``).
"""

from __future__ import annotations

from typing import Final

from quotaflow.engine.rate import Rate

# The broker's MetricConfig defaults (metrics.num.samples, metrics.sample.window.ms): the throttle-time Avgs use them.
METRIC_SAMPLES: Final = 2
METRIC_WINDOW_MS: Final = 30_000
# The broker's quota.window.num / quota.window.size.seconds defaults (and controller.quota.window.*): 11 samples of 1 s.
DEFAULT_QUOTA_WINDOW_NUM: Final = 11
DEFAULT_QUOTA_WINDOW_SIZE_SECONDS: Final = 1


class Avg(Rate):
    """Kafka ``Avg`` over a ``SampledStat``; defaults are ``MetricConfig``'s (2 samples × 30 s).

    One list of samples carries both the sum and the event count, so a read's purge resets both together (two
    ``Rate`` objects for sum and count drift apart when a read purges one and short-cuts the other)."""

    # no __slots__: Rate.__reduce__ carries its own state and a subclass's __dict__ (the counts), not its slots
    def __init__(self, samples: int = METRIC_SAMPLES, window_ms: int = METRIC_WINDOW_MS) -> None:
        super().__init__(samples, window_ms, None)
        self._count: list[int] = []

    def record(self, value: float, now_ms: int) -> None:
        n_before, cur_before = self.num_samples, self._current
        super().record(value, now_ms)
        cur = self._current
        while len(self._count) < self.num_samples:
            self._count.append(0)
        if n_before == 0 or cur != cur_before:  # a new or reset sample
            self._count[cur] = 0
        self._count[cur] += 1

    def purge(self, now_ms: int) -> None:
        age = self._purge_age
        for i, last in enumerate(self.export_state()[2]):  # the samples' last-event times (C arrays when compiled)
            if now_ms - last >= age:
                self._count[i] = 0
        super().purge(now_ms)

    def measure(self, now_ms: int) -> float:
        """Average of the recorded values still in the window; NaN when there are none."""
        total = self.total(now_ms)
        count = sum(self._count)
        return total / count if count else float("nan")


class CumulativeSum:
    """Kafka ``CumulativeSum``: a running total that never expires."""

    __slots__ = ("total",)

    def __init__(self) -> None:
        self.total = 0.0

    def record(self, value: float = 1.0) -> None:
        self.total += value

    def measure(self) -> float:
        return self.total
