"""The reference vectors' comparison rules: throttle, window, tags and decisions exact; rates within 1e-6 relative."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Final

RATE_COLUMNS: Final = frozenset({"rate_after", "metric_value"})
REL_TOL: Final = 1e-6
ABS_TOL: Final = 1e-9


def format_number(value: float) -> str:
    """The vectors' number style: at most 9 decimals, no trailing zeros (``20``, ``39.215686275``)."""
    if math.isnan(value):
        return ""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    text = f"{value:.9f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _float(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def values_match(column: str, expected: str, actual: str) -> bool:
    """Exact (numerically equal, so ``500`` matches ``500.0``) except rate columns (relative 1e-6)."""
    if expected == actual:
        return True
    e, a = _float(expected), _float(actual)
    if e is None or a is None:
        return False
    if column in RATE_COLUMNS:
        return math.isclose(e, a, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return e == a


def read_expected(path: Path) -> tuple[list[dict[str, str]], dict[str, str] | None]:
    """Rows of an expected.csv and the ``# name{tags}=value`` final-metric comment lines (None if absent)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    data = [line for line in lines if not line.startswith("#")]
    metrics: dict[str, str] = {}
    for line in lines:
        if line.startswith("# ") and "}=" in line:
            key, _, value = line[2:].partition("}=")
            metrics[key + "}"] = value
    return list(csv.DictReader(data)), (metrics or None)


def compare_rows(expected: list[dict[str, str]], actual: list[dict[str, str]]) -> list[str]:
    """Mismatch descriptions (empty when everything matches)."""
    problems: list[str] = []
    if len(expected) != len(actual):
        problems.append(f"expected {len(expected)} rows, got {len(actual)}")
    for i, (e, a) in enumerate(zip(expected, actual, strict=False), start=1):
        for col, ev in e.items():
            av = a.get(col)
            if av is None:
                problems.append(f"row {i}: column {col!r} missing")
            elif not values_match(col, ev, av):
                problems.append(f"row {i}: {col} expected {ev!r} got {av!r}")
    return problems


def compare_metrics(expected: dict[str, str] | None, actual: dict[str, str] | None) -> list[str]:
    """Final metric values: every expected metric present, values within the rate tolerance."""
    if not expected:
        return []
    if actual is None:
        return ["final metrics expected, none produced"]
    problems = []
    for key, ev in expected.items():
        av = actual.get(key)
        if av is None:
            problems.append(f"final metric {key} missing")
        elif not values_match("metric_value", ev, av):
            problems.append(f"final metric {key} expected {ev!r} got {av!r}")
    return problems
