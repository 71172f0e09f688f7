"""Avg and CumulativeSum: the metrics-library stats beside Rate (throttle-time averages, queue sizes)."""

from __future__ import annotations

import math
import random

import pytest

from quotaflow.engine.stats import Avg, CumulativeSum

T = 1_000_000


def test_cumulative_sum_never_expires() -> None:
    total = CumulativeSum()
    assert total.measure() == 0.0
    total.record(5)
    total.record()  # Kafka's Sensor.record() records 1.0
    total.record(1)
    assert total.measure() == 7


def test_avg_expires_to_nan() -> None:
    avg = Avg(2, 100)
    assert math.isnan(avg.measure(T))  # no events: NaN, not 0
    avg.record(50, T)
    avg.record(150, T + 10)
    assert avg.measure(T + 10) == 100
    assert avg.measure(T + 209) == 100  # one sample, last event at T + 10: kept
    assert math.isnan(avg.measure(T + 210))


def test_avg_is_over_events_of_every_kept_sample_and_drops_each_as_it_expires() -> None:
    avg = Avg(2, 100)
    avg.record(10, T)
    avg.record(20, T + 50)  # same sample as T
    avg.record(60, T + 100)  # the next sample
    assert avg.measure(T + 100) == (10 + 20 + 60) / 3  # per event, not per sample
    assert avg.measure(T + 249) == 30
    assert avg.measure(T + 250) == 60  # the first sample's last event (T + 50) is 2 windows old
    assert math.isnan(avg.measure(T + 300))


def test_avg_defaults_are_metric_configs() -> None:
    avg = Avg()
    assert (avg.samples, avg.window_ms) == (2, 30_000)


class _SampledAvg:
    """Test oracle: Kafka's ``SampledStat`` + ``Avg.combine`` written out plainly, one list of samples
    [value, event count, window start, last event] (samples + 1 at most, purge by last event on read)."""

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples, self.window_ms, self.list, self.current = samples, window_ms, [], 0

    def record(self, value: float, now: int) -> None:
        if not self.list:
            self.list.append([0.0, 0, now, now])
        sample = self.list[self.current]
        if now - sample[2] >= self.window_ms:
            self.current = (self.current + 1) % (self.samples + 1)
            if self.current >= len(self.list):
                self.list.append([0.0, 0, now, now])
            else:
                self.list[self.current][:] = [0.0, 0, now, now]
            sample = self.list[self.current]
        sample[0] += value
        sample[1] += 1
        sample[3] = now

    def measure(self, now: int) -> float:
        for s in self.list:
            if now - s[3] >= self.samples * self.window_ms:
                s[:] = [0.0, 0, now, now]
        count = sum(s[1] for s in self.list)
        return sum(s[0] for s in self.list) / count if count else math.nan


def test_avg_equals_one_sampled_stat_over_random_reads_and_records() -> None:
    """Reads purge, so reads between records change later results: Avg keeps one list of samples as Kafka does
    (two Rates for sum and count drift apart when a read purges one and not the other)."""
    for seed in range(400):
        rng = random.Random(seed)
        samples, window = rng.randint(1, 4), rng.choice([1, 10, 100])
        avg, oracle, now = Avg(samples, window), _SampledAvg(samples, window), rng.randint(0, 10**6)
        for _ in range(40):
            now += rng.choice([0, 1, rng.randint(0, 3 * window), rng.randint(0, 10 * window)])
            if rng.random() < 0.7:
                value = rng.uniform(0, 100)
                avg.record(value, now)
                oracle.record(value, now)
            got, want = avg.measure(now), oracle.measure(now)
            assert got == pytest.approx(want, nan_ok=True), (seed, now)


def test_connection_quotas_use_the_same_avg() -> None:
    """The listener throttle-time averages of KIP-612 are this Avg, not a second implementation."""
    from quotaflow.engine import connection

    assert connection.Avg is Avg
