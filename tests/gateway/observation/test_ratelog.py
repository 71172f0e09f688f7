"""A warning repeated thousands of times is one line per interval, with the count."""

from __future__ import annotations

import logging

import pytest

from quotaflow.gateway.observation.ratelog import RateLimitedLog


def test_one_line_per_interval_with_the_count(caplog: pytest.LogCaptureFixture,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("quotaflow.gateway.observation.ratelog.time.monotonic", lambda: now[0])
    warn = RateLimitedLog(logging.getLogger("t"), interval_s=10.0)
    with caplog.at_level(logging.WARNING):
        for _ in range(2_000):
            warn.warning("upstream %s down", "x")
            now[0] += 0.001  # 2,000 in 2 s: the first line only
        now[0] = 111.0
        warn.warning("upstream %s down", "x")
    assert [r.getMessage() for r in caplog.records] == [
        "upstream x down (1 time(s))",
        "upstream x down (2000 time(s) in the last 11 s)",
    ]
    assert warn.lines == 2
