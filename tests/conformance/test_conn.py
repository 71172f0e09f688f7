"""Every public ``conn_*`` vector replays exactly (rows and final metrics, mode conn)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from quotaflow.conformance.conn import format_value, run
from reference import VECTORS


def conn_vectors() -> list[tuple[str, str]]:
    index = VECTORS / "index.csv"
    if not index.exists():
        return []
    with index.open(newline="") as f:
        return [(r["name"], r["args"]) for r in csv.DictReader(f) if r["mode"] == "conn"]


def expected(vectors_dir: Path, name: str) -> tuple[list[dict[str, str]], dict[str, str]]:
    lines = (vectors_dir / f"{name}.expected.csv").read_text().splitlines()
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    metrics = {}
    for line in lines:
        if line.startswith("# ") and "}=" in line:
            key, _, value = line[2:].partition("}=")
            metrics[key + "}"] = value
    return rows, metrics


@pytest.mark.parametrize(("name", "args"), conn_vectors())
def test_conn_vector(vectors_dir: Path, name: str, args: str) -> None:
    rows, metrics = run(name, args.split(), vectors_dir / f"{name}.input.csv")
    want_rows, want_metrics = expected(vectors_dir, name)
    assert len(rows) == len(want_rows)
    for i, (got, want) in enumerate(zip(rows, want_rows, strict=True)):
        assert got == want, f"row {i + 2}"
    assert metrics == want_metrics


def test_there_are_conn_vectors() -> None:
    assert len(conn_vectors()) >= 9


def test_format_value() -> None:
    assert [format_value(v) for v in (19.0, 0.0, 41.5, 152.1052631578947, float("nan"))] == [
        "19", "0", "41.5", "152.105263158", ""
    ]
