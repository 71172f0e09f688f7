"""The report's charts: arrays in, PNG bytes out, sized by the figure, drawn without pyplot or a GUI backend."""

from __future__ import annotations

import io

import numpy as np
import pytest
from matplotlib.image import imread

from quotaflow.pipeline import charts
from quotaflow.pipeline.charts import ConnectionTimeline, EntitySeries

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _pixels(png: bytes) -> np.ndarray:
    assert png.startswith(PNG_MAGIC)
    image: np.ndarray = imread(io.BytesIO(png), format="png")
    return image


def _series(title: str, quota_type: str, limit: float, n: int = 30) -> EntitySeries:
    seconds = np.arange(n, dtype=np.float64)
    rate = 1000.0 + 500.0 * np.sin(seconds)
    return EntitySeries(title, quota_type, seconds, rate, np.full(n, limit), rate > 1200.0)


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0, "0"), (999.0, "999"), (1500.0, "1.5k"), (2_300_000.0, "2.3M"), (4.1e9, "4.1G"), (-1500.0, "-1.5k"),
     (7e12, "7T")],
)  # fmt: skip
def test_human_numbers(value: float, text: str) -> None:
    assert charts.human(value) == text


def test_rate_unit() -> None:
    assert charts.rate_unit("request") == "% thread time"
    assert charts.rate_unit("produce") == charts.rate_unit("fetch") == "bytes/s"


def test_rate_vs_quota_lays_out_small_multiples() -> None:
    three = [_series("a", "produce", 1200.0), _series("b", "fetch", np.nan), _series("c", "request", 1e9)]
    image = _pixels(charts.rate_vs_quota(three, "2026-01-01T00:00:00Z"))
    assert image.shape[:2] == (int(2.8 * 2 * charts.DPI), int(6.0 * 2 * charts.DPI))  # 2 rows x 2 columns
    one = _pixels(charts.rate_vs_quota(three[:1], "t0"))
    assert one.shape[:2] == (int(2.8 * charts.DPI), int(6.0 * charts.DPI))
    assert image[..., :3].std() > 0.01  # something drawn, not a blank canvas


def test_empty_inputs_still_give_a_chart() -> None:
    """No windows, no throttles, no connections: a figure that says so, not an exception."""
    assert _pixels(charts.rate_vs_quota([], "t0")).shape[:2] == (int(2.8 * charts.DPI), int(6.0 * charts.DPI))
    none = charts.throttle_distribution({"produce": np.zeros(5, np.int64), "fetch": np.zeros(0, np.int64)})
    assert _pixels(none).shape[:2] == (int(3.6 * charts.DPI), int(9.0 * charts.DPI))
    empty = ConnectionTimeline(*(np.zeros(0) for _ in range(6)))  # type: ignore[arg-type]
    assert _pixels(charts.connection_timeline(empty, "t0")).shape[:2] == (int(5.0 * charts.DPI), int(9 * charts.DPI))


def test_throttle_histogram_differs_from_the_empty_one() -> None:
    rng = np.random.default_rng(7)
    some = charts.throttle_distribution({"produce": rng.integers(0, 3000, 500), "request": np.zeros(3, np.int64)})
    none = charts.throttle_distribution({"produce": np.zeros(500, np.int64)})
    assert not np.array_equal(_pixels(some), _pixels(none))


def test_connection_timeline_draws_both_panels() -> None:
    n = 20
    seconds = np.arange(n, dtype=np.float64)
    tl = ConnectionTimeline(seconds, np.full(n, 10, np.int64), np.arange(n, dtype=np.int64), seconds * 2.0,
                            seconds * 3.0, seconds * 50.0)  # fmt: skip
    image = _pixels(charts.connection_timeline(tl, "t0"))
    assert image.shape[:2] == (int(5.0 * charts.DPI), int(9.0 * charts.DPI))
    assert image[..., :3].std() > 0.01

