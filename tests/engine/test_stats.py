"""Avg and CumulativeSum: the metrics-library stats beside Rate (throttle-time averages, queue sizes)."""

from __future__ import annotations

import math

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
