"""The compiled kernel replays every ``rate_*`` vector exactly (limit changes keep state; reads purge)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from quotaflow.conformance.compare import values_match
from quotaflow.engine.kernel import MODE_CHECK, KernelState, decide_groups, read_window


def rate_sets(vectors: Path) -> list[tuple[str, int, int]]:
    with (vectors / "index.csv").open() as f:
        return [(r["name"], int(r["args"].split()[0]), int(r["args"].split()[1]) * 1000)
                for r in csv.DictReader(f) if r["mode"] == "rate"]


@pytest.mark.parametrize("compiled", [True, False])
def test_kernel_replays_rate_vectors(vectors_dir: Path, compiled: bool) -> None:
    sets = rate_sets(vectors_dir)
    assert len(sets) >= 7
    for name, samples, window_ms in sets:
        with (vectors_dir / f"{name}.expected.csv").open() as f:
            rows = list(csv.DictReader(f))
        keys = sorted({r["quota_key"] for r in rows})
        state = KernelState.empty(len(keys), samples)
        for i, row in enumerate(rows):
            g = keys.index(row["quota_key"])
            ts = int(row["timestamp_ms"])
            throttle = 0
            if row["value"] != "measure":
                off = np.zeros(len(keys) + 1, dtype=np.int64)
                off[g + 1 :] = 1
                bounds = np.full(len(keys), float(row["quota_limit"]))
                out = decide_groups(off, bounds, np.array([ts]), np.array([float(row["value"])]),
                                    np.array([MODE_CHECK], dtype=np.int8), np.zeros(1, dtype=np.int64), False,
                                    samples, window_ms, -1, state, compiled=compiled)
                throttle = int(out[0])
            reading = read_window(state, g, ts, samples, window_ms, mutate=True)
            where = f"{name} row {i + 1}"
            assert str(throttle) == row["throttle_ms"], where
            assert str(reading.window_ms) == row["window_ms"], where
            assert values_match("rate_after", row["rate_after"], repr(reading.rate)), where
