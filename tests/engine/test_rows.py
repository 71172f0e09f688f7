"""The fused per-row loop (all three managers, and the window rows it closes) against ``Rate`` objects driven the
way Kafka's request, produce and fetch managers drive them; compiled == pure Python; chunked == whole."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaflow.core.keys import UNLIMITED
from quotaflow.engine.client_quota import NANOS_TO_PERCENT
from quotaflow.engine.kernel import KernelState, read_window
from quotaflow.engine.quota_utils import keeps_oversized_fetch, to_int32
from quotaflow.engine.rate import Rate
from quotaflow.engine.rows import (
    ALIGN_MS,
    NO_BYTE_TYPE,
    ComboQuotas,
    OpenWindows,
    RequestColumns,
    close_windows,
    decide_rows,
    read_rates,
)

Case = tuple[RequestColumns, ComboQuotas, int, int]


def make_case(seed: int, rows: int = 400, samples: int = 11, window_ms: int = 1000) -> Case:
    """Four combos; combos 0 and 1 share every manager's state row (one quota-id), 2 and 3 have their own."""
    rng = np.random.default_rng(seed)
    ts = 1_000_000 + np.cumsum(rng.integers(0, 400, rows))
    cols = RequestColumns.of(
        rng.integers(0, 4, rows), ts, rng.random(rows) < 0.15, rng.choice([0, 1, NO_BYTE_TYPE], rows),
        rng.integers(0, 3_000_000, rows), rng.integers(0, 500_000, rows), rng.integers(0, 300_000, rows),
        rng.integers(0, 600_000, rows),
    )  # fmt: skip
    group = np.array([[0, 0, 1, 2], [3, 3, 4, 5], [6, 6, 7, 8]], dtype=np.int64)
    bounds = [0.0, 5.0, 200_000.0, 500_000.0, UNLIMITED, math.inf]
    bound = np.array([[rng.choice(bounds)] * 2 + list(rng.choice(bounds, 2)) for _ in range(3)], dtype=np.float64)
    enabled = np.array([[True] * 4, [True] * 4, [bool(rng.random() < 0.8)] * 4])
    return cols, ComboQuotas(group, bound, enabled), samples, window_ms


def reference(case: Case) -> tuple[np.ndarray, list[tuple[int, int, float, float, int, int]]]:
    """Per row each manager's own throttle, and the window rows, from ``Rate`` objects (reads on a copy)."""
    cols, q, samples, window_ms = case
    n = len(cols.ts_ms)
    rates: dict[int, Rate] = {}
    out = np.zeros((4, n), dtype=np.int64)
    windows: dict[int, list[float]] = {}  # group -> [start, value, count, ms, last, recorded]
    closed: list[tuple[int, int, float, float, int, int]] = []

    def rate_of(m: int, c: int) -> Rate:
        g = int(q.group[m, c])
        if g not in rates:
            rates[g] = Rate(samples, window_ms, None if q.bound[m, c] == math.inf else float(q.bound[m, c]))
        return rates[g]

    def close(g: int) -> None:
        w = windows[g]
        if w[5]:
            rate = copy.deepcopy(rates[g]).measure(int(w[4])) if g in rates else 0.0
            closed.append((g, int(w[0]), w[1], rate, int(w[2]), int(w[3])))

    def touch(g: int, t: int) -> list[float]:
        start = t // ALIGN_MS * ALIGN_MS
        if g in windows and windows[g][0] != start:
            close(g)
            del windows[g]
        w = windows.setdefault(g, [start, 0.0, 0, 0, t, 0])
        w[4] = t
        return w

    for r in range(n):
        c, t = int(cols.combo[r]), int(cols.ts_ms[r])
        w = touch(int(q.group[0, c]), t)
        req = 0
        if not cols.exempt[r] and q.enabled[0, c]:
            rate = rate_of(0, c)
            io, net = cols.io_thread_ns[r] * NANOS_TO_PERCENT, cols.network_thread_ns[r] * NANOS_TO_PERCENT
            req = to_int32(rate.record_and_throttle(io, t, window_ms))
            rate.record(net, t)
            w[1] += io
            w[1] += net
            w[2] += req > 0
            w[3] += req
            w[5] = 1
        out[0, r] = req
        if cols.btype[r] == NO_BYTE_TYPE:
            continue
        m = 1 + int(cols.btype[r])
        w = touch(int(q.group[m, c]), t)
        if not q.enabled[m, c]:
            continue
        x = float(cols.request_bytes[r] if m == 1 else cols.response_bytes[r])
        rate = rate_of(m, c)
        own = to_int32(rate.record_and_throttle(x, t))
        out[m, r] = own
        bound = float(q.bound[m, c])
        kept = bound != math.inf and keeps_oversized_fetch(x, *rate.reading(t), bound, samples, window_ms)
        if m == 2 and max(own, req) > 0 and not kept:
            rate.record(-x, t)
        w[1] += x
        w[2] += own > 0
        w[3] += own
        w[5] = 1
    for g in sorted(windows):
        close(g)
    out[3] = out[:3].max(axis=0)  # the applied throttle
    return out, closed


def run(case: Case, compiled: bool, chunk: int | None = None) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    cols, q, samples, window_ms = case
    n = len(cols.ts_ms)
    state = KernelState.empty(9, samples)
    out = np.zeros((4, n), dtype=np.int64)
    open_windows = OpenWindows.empty(9)
    rows: list[tuple[int, ...]] = []
    step = chunk or n
    for lo in range(0, n, step):
        got = decide_rows(cols, q, samples, window_ms, state, out, lo=lo, hi=min(n, lo + step), windows=open_windows,
                          compiled=compiled)  # fmt: skip
        assert got is not None
        rows += list(zip(got.group, got.window_start_ms, got.value_sum, got.rate, got.throttle_count,
                         got.throttle_ms_sum, strict=True))  # fmt: skip
    rest = close_windows(open_windows, state, samples, window_ms, compiled)
    rows += list(zip(rest.group, rest.window_start_ms, rest.value_sum, rest.rate, rest.throttle_count,
                     rest.throttle_ms_sum, strict=True))  # fmt: skip
    return out, rows


def _key(rows: list[tuple[int, ...]]) -> list[tuple[float, ...]]:
    return sorted((float(g), float(s), float(v), float(r), float(c), float(ms)) for g, s, v, r, c, ms in rows)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rows_loop_equals_rate_objects_compiled_and_pure(seed: int) -> None:
    case = make_case(seed)
    want, want_windows = reference(case)
    for compiled in (True, False):
        out, windows = run(case, compiled)
        assert np.array_equal(out, want), compiled
        assert _key(windows) == _key(want_windows), compiled  # exact floats: same additions in the same order
    assert (want > 0).any() and len(want_windows) > 10


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), samples=st.sampled_from([1, 2, 11]), window_ms=st.sampled_from([500, 1000, 2000]),
       chunk=st.integers(1, 150))  # fmt: skip
def test_chunks_and_window_settings_change_nothing(seed: int, samples: int, window_ms: int, chunk: int) -> None:
    """Rows decided in chunks (state and open windows carried across calls) == one call == ``Rate`` objects."""
    case = make_case(seed, rows=150, samples=samples, window_ms=window_ms)
    want, want_windows = reference(case)
    out, windows = run(case, True, chunk)
    assert np.array_equal(out, want)
    assert _key(windows) == _key(want_windows)


def test_thread_parts_decide_only_their_combos() -> None:
    """``part_of`` splits combos over callers: the union of the parts' runs is the whole run."""
    cols, q, samples, window_ms = make_case(7)
    want, _ = run((cols, q, samples, window_ms), True)
    state = KernelState.empty(9, samples)
    out = np.zeros_like(want)
    part_of = np.array([0, 0, 1, 1], dtype=np.int64)  # combos 0 and 1 share state rows: same part
    for part in (1, 0):
        decide_rows(cols, q, samples, window_ms, state, out, part=part, part_of=part_of)
    assert np.array_equal(out, want)


def test_read_rates_equals_read_window() -> None:
    cols, q, samples, window_ms = make_case(4)
    state = KernelState.empty(9, samples)
    decide_rows(cols, q, samples, window_ms, state, np.zeros((4, len(cols.ts_ms)), dtype=np.int64))
    groups = np.array([0, 1, 2, 3, 8, 0], dtype=np.int64)
    end = int(cols.ts_ms[-1])
    now = np.array([end, end + 500, end + 2_000, end, end + 60_000, end + 100], dtype=np.int64)
    want = [read_window(state, int(g), int(t), samples, window_ms).rate for g, t in zip(groups, now, strict=True)]
    before = state.value.copy()
    assert read_rates(state, groups, now, samples, window_ms).tolist() == want
    assert read_rates(state, groups, now, samples, window_ms, compiled=False).tolist() == want
    assert np.array_equal(state.value, before)  # reads do not purge
    assert want[0] > 0
