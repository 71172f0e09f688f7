"""Kafka's metrics-library tests (TEST-CASES §1–§2): RateTest, SampledStatTest, MetricsTest, QuotaUtilsTest."""

from __future__ import annotations

import math
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaflow.engine import rate as rate_module
from quotaflow.engine.quota_utils import LONG_MAX, bounded_throttle_time, java_round, throttle_time, to_int32
from quotaflow.engine.rate import Rate
from twins import assert_compiled, forms

# Every Rate test runs on both forms of rate.py: the extension `make setup` builds and its pure-Python twin.
RATE_FORMS = [pytest.param(p.values[0].Rate, id=p.id) for p in forms(rate_module)]

T = 1_000_000


@pytest.mark.parametrize(
    ("samples", "window_sec", "expected"),
    [(1, 1, 50.05005005), (1, 11, 4.5458678), (11, 1, 4.5458678), (11, 11, 0.41322656)],
)
@pytest.mark.parametrize("rate_type", RATE_FORMS)
def test_rate_with_no_prior_available_samples(rate_type: type[Rate], samples: int, window_sec: int,
                                              expected: float) -> None:
    rate = rate_type(samples, window_sec * 1000)
    rate.record(50, T)
    now = T + window_sec * 1000 - 1
    value = rate.measure(now)
    assert not math.isnan(value)
    assert value == pytest.approx(50 / ((window_sec * 1000 - 1) / 1000 + (samples - 1) * window_sec), rel=1e-9)
    assert value == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("rate_type", RATE_FORMS)
def test_rate_is_consistent_after_the_first_window(rate_type: type[Rate]) -> None:
    rate = rate_type(2, 1000)
    t = T
    steps = [0, 99] + [100] * 9
    for step in steps:
        t += step
        rate.record(1, t)
    t += 101
    for step in steps:
        t += step
        rate.record(1, t)
        value = rate.measure(t)
        assert 10 <= value <= 11
        assert rate.measure(t) == value


def kept_samples(stat: Rate, now: int) -> int:
    """A SampledStat whose measure is the number of samples holding events (SampledStatTest's stat)."""
    stat.purge(now)
    values, _, _, _ = stat.export_state()
    return sum(1 for v in values if v > 0)


def complete_sample(stat: Rate, t: int) -> int:
    stat.record(1, t)
    t += 999
    stat.record(1, t)
    return t + 1


@pytest.mark.parametrize("rate_type", RATE_FORMS)
def test_sample_is_purged_if_it_does_not_overlap(rate_type: type[Rate]) -> None:
    stat = rate_type(2, 1000)
    t = complete_sample(stat, T)
    assert kept_samples(stat, t + 2500) == 0


@pytest.mark.parametrize("rate_type", RATE_FORMS)
def test_sample_is_kept_if_it_overlaps(rate_type: type[Rate]) -> None:
    stat = rate_type(2, 1000)
    t = complete_sample(stat, T)
    assert kept_samples(stat, t + 1500) == 1


@pytest.mark.parametrize("rate_type", RATE_FORMS)
def test_sample_is_kept_if_it_overlaps_and_extra(rate_type: type[Rate]) -> None:
    stat = rate_type(2, 1000)
    t = complete_sample(stat, T)
    t = complete_sample(stat, t + 100)
    t += 100
    stat.record(1, t)
    assert kept_samples(stat, t) == 3


@pytest.mark.parametrize("rate_type", RATE_FORMS)
def test_rate_windowing(rate_type: type[Rate]) -> None:
    rate = rate_type(3, 30_000)
    rate.record(100, T)
    rate.record(100, T + 30_000)
    assert rate.window_size(T + 75_000) == 75_000
    assert rate.measure(T + 75_000) == pytest.approx(200 / 75)
    assert rate.measure(T + 75_000 + 90_000) == 0


@pytest.mark.parametrize("rate_type", RATE_FORMS)
def test_samples_must_be_positive(rate_type: type[Rate]) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        rate_type(0, 1000)


@pytest.mark.parametrize("rate_type", RATE_FORMS)
def test_strict_quota_with_rate(rate_type: type[Rate]) -> None:
    """SensorTest.testStrictQuotaEnforcementWithRate: the padded window keeps the rate at 3.0 for 5 s."""
    rate = rate_type(11, 1000, 2.0)
    rate.record(30, T)
    assert rate.measure(T) == 3.0
    assert rate.measure(T + 5000) == 3.0
    assert not rate.measure(T + 5000) <= rate.bound  # a strict record now would throw


# -- QuotaUtilsTest ------------------------------------------------------------------------------------------------
def fresh_window(samples: int) -> int:
    return Rate(samples, 1000).window_size(T)


@pytest.mark.parametrize("samples", [10, 11])
def test_throttle_time_observed_equals_quota(samples: int) -> None:
    assert throttle_time(16.5, 16.5, fresh_window(samples)) == 0
    assert throttle_time(16.5, 20.4, fresh_window(samples)) < 0
    assert bounded_throttle_time(18.2, 18.2, fresh_window(samples), 500) == 0
    assert bounded_throttle_time(16.5, 22.4, fresh_window(samples), 500) < 0


def test_throttle_time_above_quota() -> None:
    assert fresh_window(3) == 2000
    assert throttle_time(100, 50, fresh_window(3)) == 2000
    assert bounded_throttle_time(55, 50, fresh_window(2), 500) == 100
    assert bounded_throttle_time(100, 50, fresh_window(10), 500) == 500


def test_zero_bound_is_infinite_not_an_error() -> None:
    assert throttle_time(1.0, 0.0, 1000) == LONG_MAX
    assert bounded_throttle_time(1.0, 0.0, 1000, 1000) == 1000
    assert to_int32(LONG_MAX) == -1


def test_java_round_is_half_up() -> None:
    assert [java_round(x) for x in (0.5, 1.5, 2.5, -0.5, -1.5)] == [1, 2, 3, 0, -1]
    assert java_round(float("nan")) == 0
    assert java_round(float("inf")) == LONG_MAX


@pytest.mark.parametrize("rate_type", RATE_FORMS)
@settings(max_examples=80, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 4000), st.sampled_from([0.0, 5.0, 300.0, -5.0])), max_size=30),
       samples=st.sampled_from([1, 2, 11]), window_ms=st.sampled_from([1000, 30000]), gap=st.integers(0, 40_000))
def test_peek_reads_what_the_check_would_and_changes_nothing(rate_type: type[Rate], steps: list[tuple[int, float]],
                                                             samples: int, window_ms: int, gap: int) -> None:
    rate = rate_type(samples, window_ms, 100.0)
    t = 1_000_000
    for step, value in steps:
        t += step
        rate.record(value, t)
    t += gap
    before = rate.export_state()
    peeked = rate.peek(t)
    assert rate.export_state() == before  # nothing moved: later decisions are the same as without the look
    assert peeked == (rate.total(t), rate.window_size(t))  # what the (purging) check reads at t


@pytest.mark.parametrize("rate_type", RATE_FORMS)
@settings(max_examples=80, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 40_000), st.sampled_from([0.0, 5.0, 300.0, -5.0, 1e6])),
                      max_size=40),
       samples=st.sampled_from([1, 2, 11]), window_ms=st.sampled_from([1, 1000, 30000]),
       cap=st.sampled_from([None, 1000]))
def test_record_and_throttle_is_record_then_the_check(rate_type: type[Rate], steps: list[tuple[int, float]],
                                                      samples: int, window_ms: int, cap: int | None) -> None:
    """The hot path writes ``record``'s common case out: its samples and its throttle must be exactly what
    ``record`` followed by the check's reading (``Rate.measure`` against the bound) give, rolls and purges too."""
    fast, slow = rate_type(samples, window_ms, 100.0), rate_type(samples, window_ms, 100.0)
    t = 1_000_000
    for step, value in steps:
        t += step
        throttle = fast.record_and_throttle(value, t, cap)
        slow.record(value, t)
        rate = slow.measure(t)
        expected = 0 if rate <= 100.0 else throttle_time(rate, 100.0, slow.window_size(t))
        assert throttle == (expected if cap is None else min(expected, cap))
        assert fast.export_state() == slow.export_state()


def test_the_engine_rate_is_compiled() -> None:
    """The gateway meters every Produce and Fetch through it: `make setup` must have built its extension."""
    assert_compiled(rate_module)


RATE_OPS = st.lists(st.tuples(st.sampled_from(["record", "check", "measure", "peek", "window", "total"]),
                              st.integers(-3_000, 40_000),
                              st.sampled_from([0.0, 5.0, 300.0, -5.0, 0.1, 1 / 3, 2.0**60, 5e-324])
                              | st.floats(-1e12, 1e12, allow_nan=False),
                              st.sampled_from([None, 0, 1000])), max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops=RATE_OPS, samples=st.sampled_from([1, 2, 11, 60]), window_ms=st.sampled_from([1, 1000, 30000]),
       bound=st.sampled_from([None, 0.0, 100.0, 1e9]))
def test_compiled_rate_is_its_pure_twin(ops: list[tuple[str, int, float, int | None]], samples: int, window_ms: int,
                                        bound: float | None) -> None:
    """Every reading and every sample of the compiled Rate equals its pure twin's, on any sequence of records, checks
    and reads, with the clock going back as well as forward (the compiled form does its arithmetic in C doubles and
    long longs, the twin in Python floats and ints)."""
    compiled_type, pure_type = (p.values[0] for p in RATE_FORMS)
    compiled, pure = compiled_type(samples, window_ms, bound, T), pure_type(samples, window_ms, bound, T)
    t = T
    for op, step, value, cap in ops:
        t += step
        results = []
        for rate in (compiled, pure):
            if op == "record":
                results.append(rate.record(value, t))
            elif op == "check":
                results.append(rate.record_and_throttle(value, t, cap))
            elif op == "measure":
                results.append(rate.measure(t))
            elif op == "peek":
                results.append(rate.peek(t))
            elif op == "window":
                results.append(rate.window_size(t))
            else:
                results.append(rate.total(t))
        assert results[0] == results[1], (op, t)
        assert type(results[0]) is type(results[1])
        assert compiled.export_state() == pure.export_state()
        assert compiled.last_record_ms == pure.last_record_ms


def test_rates_and_their_subclasses_survive_pickling_and_copies() -> None:
    """A Spark task or a deepcopy carries a Rate whole: its configuration, its samples and a Python subclass's own
    fields (``Avg``'s event counts). (The twin is loaded under a name no other process could import; the next test
    pickles it.)"""
    import copy
    import pickle

    from quotaflow.engine.sensors import RateSensor
    from quotaflow.engine.stats import Avg

    rates: list[Rate] = [Rate(11, 1000, 5.0, T), RateSensor(11, 1000, 5.0, T), Avg()]
    for rate in rates:
        for t in range(T, T + 3500, 250):
            rate.record(7.0, t)
        for again in (pickle.loads(pickle.dumps(rate)), copy.deepcopy(rate)):
            assert type(again) is type(rate)
            assert (again.samples, again.window_ms, again.bound, again.last_record_ms) == \
                (rate.samples, rate.window_ms, rate.bound, rate.last_record_ms)
            assert again.export_state() == rate.export_state()
            assert again.measure(T + 4000) == rate.measure(T + 4000) > 0


@pytest.mark.parametrize("module", forms(rate_module))
def test_both_forms_pickle_and_copy_their_samples(module: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled samples are C arrays, no Python fields a default pickle could carry: ``Rate.__reduce__`` carries
    the configuration and the samples in both forms, and each copy is independent of the original."""
    import copy
    import pickle
    import sys

    monkeypatch.setitem(sys.modules, module.__name__, module)  # the twin's name, importable for this test
    rate = module.Rate(3, 1000, 5.0, T)
    for t in range(T, T + 5500, 300):  # rolls through all samples + 1 slots and reuses them
        rate.record_and_throttle(7.0, t)
    state = rate.export_state()
    copies = [pickle.loads(pickle.dumps(rate)), copy.deepcopy(rate), copy.copy(rate)]
    for again in copies:
        assert type(again) is module.Rate
        assert again.export_state() == state and again.num_samples == 4
        assert (again.samples, again.window_ms, again.bound, again.last_record_ms) == (3, 1000, 5.0, T + 5400)
    throttle = rate.record_and_throttle(100.0, T + 5600)
    assert throttle > 0
    for again in copies:
        assert again.export_state() == state  # its own samples, not the original's
        assert again.record_and_throttle(100.0, T + 5600) == throttle
        assert again.export_state() == rate.export_state()


@pytest.mark.parametrize("rate_type", RATE_FORMS)
@pytest.mark.parametrize("samples", [1, 60, 1000])
def test_any_number_of_samples(rate_type: type[Rate], samples: int) -> None:
    """``quota.window.num`` is the operator's: every one of its ``samples + 1`` slots is used and reused, the window
    and the rate are Kafka's, whatever the count (the compiled storage is sized per Rate, no fixed cap)."""
    rate = rate_type(samples, 10, 1e9, T)
    t = T
    for i in range(3 * (samples + 1)):  # one record per 10 ms window: three rounds over every slot
        t = T + 10 * i
        assert rate.record_and_throttle(1.0, t) == 0
    values, starts, lasts, current = rate.export_state()
    assert len(values) == samples + 1 and current == (3 * (samples + 1) - 1) % (samples + 1)
    reused = (current + 1) % (samples + 1)  # the oldest slot, ``samples`` windows old: purged by the last check
    assert values[reused] == 0.0 and starts[reused] == t
    assert sorted(values) == [0.0] + [1.0] * samples
    assert sorted(starts) == [*range(t - 10 * (samples - 1), t + 1, 10), t] and starts == lasts
    window = max(10 * (samples - 1), 1)  # elapsed since the oldest kept sample: already samples - 1 windows
    assert rate.peek(t) == (float(samples), window)
    assert rate.window_size(t) == window and rate.measure(t) == samples / (window / 1000.0)


@pytest.mark.parametrize("rate_type", RATE_FORMS)
def test_imported_state_is_checked_against_the_storage(rate_type: type[Rate]) -> None:
    """The compiled samples are C arrays indexed by ``current`` and ``num_samples``: a state that does not fit is
    refused, never written or read out of bounds (the kernel's hand-off stays within them)."""
    rate = rate_type(2, 1000, 5.0, T)
    with pytest.raises(ValueError, match="oversized"):
        rate.import_state([1.0] * 4, [T] * 4, [T] * 4, 0)
    with pytest.raises(ValueError, match="inconsistent"):
        rate.import_state([1.0] * 2, [T] * 3, [T] * 2, 0)
    for current in (-1, 3, 2):
        with pytest.raises(ValueError, match="current sample"):
            rate.import_state([1.0] * 2, [T] * 2, [T] * 2, current)
    rate.import_state([1.0, 2.0], [T, T + 1000], [T + 10, T + 1001], 1)
    assert rate.export_state() == ([1.0, 2.0], [T, T + 1000], [T + 10, T + 1001], 1)
    assert rate.record_and_throttle(1.0, T + 1500) == 0  # into the current sample: 4 / 2 s
    assert rate.export_state() == ([1.0, 3.0], [T, T + 1000], [T + 10, T + 1500], 1)


def test_a_rate_without_init_refuses_to_record() -> None:
    """Compiled, the samples' storage comes from ``__init__``: a Rate made by ``__new__`` alone has none, and
    recording into it is an error, not a write through a null pointer."""
    rate = Rate.__new__(Rate)
    assert rate.num_samples == 0 and rate.export_state() == ([], [], [], 0)
    with pytest.raises(TypeError, match="no sample storage"):
        rate.record_and_throttle(1.0, T)
    with pytest.raises(TypeError, match="no sample storage"):
        rate.window_size(T)
    assert rate.total(T) == 0.0  # reads no sample: there are none


def test_the_compiled_samples_are_freed_with_their_rate() -> None:
    """Each compiled Rate owns a block of C memory (its samples, from PyMem, which tracemalloc traces): dropping
    Rates, their subclasses and their copies gives all of it back."""
    import copy
    import gc
    import tracemalloc

    from quotaflow.engine.sensors import RateSensor
    from quotaflow.engine.stats import Avg

    def churn() -> None:
        for i in range(300):
            rate = (Rate(60, 1000, 5.0, T), RateSensor(60, 1000, 5.0, T), Avg(60))[i % 3]
            rate.record(1.0, T + i)
            if type(rate) is Rate:
                rate.__init__(60, 1000)  # type: ignore[misc]  # a second __init__ replaces the block
            copy.deepcopy(rate)

    churn()  # warm-up: caches and free lists settle
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        churn()
        gc.collect()
        leaked = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert leaked < 300 * 61 * 24 // 10, leaked  # a tenth of one block per Rate made: none is kept
