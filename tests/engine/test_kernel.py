"""The array kernel against the ``Rate`` class: same throttles, same state, compiled == pure Python."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaflow.core.keys import UNLIMITED
from quotaflow.engine.kernel import (
    MODE_CHECK,
    MODE_NOCHECK,
    MODE_SKIP,
    KernelState,
    decide_groups,
    read_window,
)
from quotaflow.engine.quota_utils import keeps_oversized_fetch, to_int32
from quotaflow.engine.rate import Rate

Row = tuple[int, float, int]  # (time step, value, mode)


def reference(rows: list[Row], bound: float, samples: int, window_ms: int, max_ms: int,
              floors: list[int], unrecord: bool) -> tuple[list[int], Rate]:
    """Drive one ``Rate`` the way a Kafka manager would, row by row."""
    rate = Rate(samples, window_ms, None if bound == math.inf else bound)
    out = []
    t = 1_000_000
    for (step, value, mode), floor in zip(rows, floors, strict=True):
        t += step
        if mode == MODE_SKIP:
            out.append(0)
            continue
        if mode == MODE_NOCHECK:
            rate.record(value, t)
            own = 0
        else:
            own = to_int32(rate.record_and_throttle(value, t, None if max_ms < 0 else max_ms))
        out.append(own)
        kept = mode == MODE_CHECK and bound != math.inf and keeps_oversized_fetch(value, *rate.reading(t), bound,
                                                                                 samples, window_ms)
        if unrecord and max(own, floor) > 0 and not kept:
            rate.record(-value, t)
    return out, rate


def arrays(groups: list[list[Row]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    offsets = np.zeros(len(groups) + 1, dtype=np.int64)
    ts: list[int] = []
    values: list[float] = []
    modes: list[int] = []
    for g, rows in enumerate(groups):
        offsets[g + 1] = offsets[g] + len(rows)
        t = 1_000_000
        for step, value, mode in rows:
            t += step
            ts.append(t)
            values.append(value)
            modes.append(mode)
    return offsets, np.array(ts, dtype=np.int64), np.array(values, dtype=np.float64), np.array(modes, dtype=np.int8)


row = st.tuples(
    st.integers(0, 2500),
    st.sampled_from([0.0, 1.0, 50.0, 400.0, 2300.0, 1e6]),
    st.sampled_from([MODE_CHECK, MODE_CHECK, MODE_NOCHECK, MODE_SKIP]),
)
bound = st.sampled_from([0.0, 10.0, 500.0, 1000.0, UNLIMITED, math.inf])


@settings(max_examples=60, deadline=None)
@given(
    groups=st.lists(st.tuples(st.lists(row, max_size=40), bound), min_size=1, max_size=4),
    samples=st.sampled_from([1, 2, 11]),
    window_ms=st.sampled_from([1, 1000, 30000]),
    max_ms=st.sampled_from([-1, 1000]),
    unrecord=st.booleans(),
    floor_seed=st.integers(0, 3),
)
def test_kernel_matches_rate(groups: list[tuple[list[Row], float]], samples: int, window_ms: int, max_ms: int,
                             unrecord: bool, floor_seed: int) -> None:
    offsets, ts, values, modes = arrays([rows for rows, _ in groups])
    bounds = np.array([b for _, b in groups], dtype=np.float64)
    floors = np.array([(i * 7 + floor_seed) % 4 == 0 for i in range(len(ts))], dtype=np.int64) * 100
    expected: list[int] = []
    rates = []
    for g, (rows, b) in enumerate(groups):
        lo, hi = offsets[g], offsets[g + 1]
        out, rate = reference(rows, b, samples, window_ms, max_ms, floors[lo:hi].tolist(), unrecord)
        expected += out
        rates.append(rate)
    for compiled in (False, True):
        state = KernelState.empty(len(groups), samples)
        got = decide_groups(offsets, bounds, ts, values, modes, floors, unrecord, samples, window_ms, max_ms, state,
                            compiled=compiled)
        assert got.tolist() == expected
        for g, rate in enumerate(rates):
            values_, starts, lasts, current = rate.export_state()
            k = int(state.n[g])
            assert state.value[g, :k].tolist() == values_
            assert state.start[g, :k].tolist() == starts
            assert state.last[g, :k].tolist() == lasts
            assert int(state.current[g]) == current


def test_state_carries_across_batches() -> None:
    """Two batches with state in and out give the same throttles as one batch."""
    rows = [(0, 400.0, MODE_CHECK)] * 10 + [(1500, 2300.0, MODE_CHECK)] + [(1000, 400.0, MODE_CHECK)] * 5
    offsets, ts, values, modes = arrays([rows])
    bounds = np.array([500.0])
    floors = np.zeros(len(ts), dtype=np.int64)
    whole = decide_groups(offsets, bounds, ts, values, modes, floors, False, 11, 1000, -1, KernelState.empty(1, 11))
    state = KernelState.empty(1, 11)
    parts = []
    for lo, hi in ((0, 7), (7, len(ts))):
        off = np.array([0, hi - lo], dtype=np.int64)
        parts += decide_groups(off, bounds, ts[lo:hi], values[lo:hi], modes[lo:hi], floors[lo:hi], False, 11, 1000,
                               -1, state).tolist()
    assert parts == whole.tolist()
    assert max(whole) > 0


def test_rate_round_trip_and_read_window() -> None:
    rate = Rate(11, 1000, 500.0)
    for i in range(15):
        rate.record(100.0 * i, 1_000_000 + 700 * i)
    state = KernelState.empty(2, 11)
    state.load_rate(1, rate)
    now = 1_012_000
    reading = read_window(state, 1, now, 11, 1000)
    assert reading.window_ms == rate.window_size(now)
    assert reading.rate == rate.measure(now)
    back = state.to_rate(1, 11, 1000, 500.0)
    assert back.measure(now) == rate.measure(now)


def test_read_window_without_mutation_leaves_state() -> None:
    state = KernelState.empty(1, 2)
    off = np.array([0, 1], dtype=np.int64)
    decide_groups(off, np.array([math.inf]), np.array([1_000_000]), np.array([100.0]), np.array([0], dtype=np.int8),
                  np.zeros(1, dtype=np.int64), False, 2, 1000, -1, state)
    before = state.start.copy()
    later = read_window(state, 0, 1_005_000, 2, 1000)
    assert later.total == 0.0  # expired: purged in the reading
    assert (state.start == before).all()
    read_window(state, 0, 1_005_000, 2, 1000, mutate=True)
    assert state.start[0, 0] == 1_005_000


def test_shape_errors() -> None:
    with pytest.raises(ValueError, match="slots"):
        decide_groups(np.array([0, 0]), np.array([1.0]), np.array([], dtype=np.int64), np.array([]),
                      np.array([], dtype=np.int8), np.array([], dtype=np.int64), False, 11, 1000, -1,
                      KernelState.empty(1, 2))


def test_short_arrays_are_rejected() -> None:
    with pytest.raises(ValueError, match="ts_ms"):
        decide_groups(np.array([0, 2]), np.array([1.0]), np.array([1], dtype=np.int64), np.array([1.0, 1.0]),
                      np.zeros(2, dtype=np.int8), np.zeros(2, dtype=np.int64), False, 2, 1000, -1,
                      KernelState.empty(1, 2))


@pytest.mark.parametrize("compiled", [True, False])
def test_time_going_backwards_matches_rate(compiled: bool) -> None:
    """Wall clocks can step back: the window then uses Java's truncating division, in both implementations."""
    steps = [(0, 100.0), (-500, 100.0), (5000, 100.0), (-4700, 50.0), (-200, 10.0)]
    rate = Rate(11, 1000, 10.0)
    expected, ts, t = [], [], 1_000_000
    for step, value in steps:
        t += step
        ts.append(t)
        expected.append(to_int32(rate.record_and_throttle(value, t)))
    state = KernelState.empty(1, 11)
    got = decide_groups(np.array([0, len(ts)]), np.array([10.0]), np.array(ts), np.array([v for _, v in steps]),
                        np.zeros(len(ts), dtype=np.int8), np.zeros(len(ts), dtype=np.int64), False, 11, 1000, -1,
                        state, compiled=compiled)
    assert got.tolist() == expected
    assert expected[1] == round((200 / 9.5 - 10) / 10 * 9500)  # elapsed -500 ms truncates to 0 full windows
