"""Mode ``rate`` (args ``samples windowSec``): one Rate sensor per key, unbounded throttle, read after each row."""

from __future__ import annotations

import csv
from pathlib import Path

from quotaflow.conformance.compare import format_number
from quotaflow.engine.quota_utils import to_int32
from quotaflow.engine.rate import Rate


def run(name: str, args: list[str], input_path: Path) -> tuple[list[dict[str, str]], dict[str, str] | None]:
    samples, window_ms = int(args[0]), int(args[1]) * 1000
    rates: dict[str, Rate] = {}
    out: list[dict[str, str]] = []
    with input_path.open(newline="") as f:
        for row in csv.DictReader(f):
            ts = int(row["timestamp_ms"])
            limit = float(row["quota_limit"])
            rate = rates.get(row["quota_key"])
            if rate is None:
                rate = rates[row["quota_key"]] = Rate(samples, window_ms, limit)
            elif rate.bound != limit:
                rate.bound = limit  # config replaced, samples kept
            throttle = 0
            if row["value"] != "measure":
                throttle = to_int32(rate.record_and_throttle(float(row["value"]), ts))
            rendered = dict(row)
            rendered["rate_after"] = format_number(rate.measure(ts))
            rendered["window_ms"] = str(rate.window_size(ts))
            rendered["throttle_ms"] = str(throttle)
            out.append(rendered)
    return out, None
