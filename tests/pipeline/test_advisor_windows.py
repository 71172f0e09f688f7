"""The advisor's cells: the rate over the quota window, by the dense and the sparse path, against a plain loop."""

from __future__ import annotations

import numpy as np
import pytest

from quotaflow.pipeline import advisor


def _loop(keys: np.ndarray, summed: np.ndarray, seconds: int, window: int) -> dict[int, int]:
    series: dict[int, np.ndarray] = {}
    for k, v in zip(keys.tolist(), summed.tolist(), strict=True):
        series.setdefault(k // seconds, np.zeros(seconds, np.int64))[k % seconds] += v
    out = {}
    for g, s in series.items():
        for end in range(window - 1, seconds):
            total = int(s[end - window + 1:end + 1].sum())
            if total:
                out[g * seconds + end] = total
    return out


@pytest.mark.parametrize(("groups", "seconds", "window", "active"), [(3, 40, 11, 30), (5, 200, 3, 10), (2, 5, 5, 5),
                                                                      (4, 30, 1, 12), (50, 500, 11, 3)])
def test_window_sums_equal_a_loop_by_both_paths(groups: int, seconds: int, window: int, active: int) -> None:
    rng = np.random.default_rng(groups * seconds + window)
    keys = np.unique(np.concatenate([g * seconds + rng.choice(seconds, size=min(active, seconds), replace=False)
                                     for g in rng.choice(groups * 3, size=groups, replace=False)]))
    summed = rng.integers(1, 10**9, size=len(keys))
    want = _loop(keys, summed, seconds, window)
    for path in (advisor._window_sums_sparse, None):
        if path is None:
            g, row = np.unique(keys // seconds, return_inverse=True)
            ends, sums = advisor._window_sums_dense(g, row, keys % seconds, summed, seconds, window)
        else:
            ends, sums = path(keys, summed, seconds, window)
        assert dict(zip(ends.tolist(), sums.tolist(), strict=True)) == want
        assert np.all(np.diff(ends) > 0)  # key order
    ends, sums = advisor.window_sums(keys, summed, seconds, window)
    assert dict(zip(ends.tolist(), sums.tolist(), strict=True)) == want
