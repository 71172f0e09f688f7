"""Reference vectors through Spark (``python -m quotaflow.conformance --engine spark DIR``).

The vector's input rows become a DataFrame; rows are partitioned by the state they share (mode ``rate``: one group
per ``quota_key``, whose sensors are independent; ``client`` and ``conn``: one group, since quota updates and the
acceptors' global time order couple every row) and each group is replayed inside a Spark task by the same shared
engine code the Python runner uses (``quotaflow.conformance.<mode>``). Rows come back with their input position,
so the output is in input order. The Spark session is the ``test`` preset, started once per process.
"""

from __future__ import annotations

import csv
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

GROUP_COLUMN: Final = {"rate": "quota_key"}
_ROW = "_row"


def _session() -> Any:
    from quotaflow.pipeline.session import get_session

    return get_session("test")


def _replay_group(mode: str, name: str, args: list[str], fieldnames: list[str]) -> Callable[[pa.Table], pa.Table]:
    """The task body: write the group's rows back as a vector input, run the mode's shared code on it."""

    def fn(table: pa.Table) -> pa.Table:
        import importlib

        runner = importlib.import_module(f"quotaflow.conformance.{mode}").run
        rows = table.sort_by(_ROW).to_pylist()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{name}.input.csv"
            with path.open("w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=fieldnames)
                w.writeheader()
                for r in rows:
                    w.writerow({k: r[k] for k in fieldnames})
            out, metrics = runner(name, args, path)
        return pa.table(
            {
                _ROW: pa.array([r[_ROW] for r in rows] + [-1], pa.int64()),
                "json": pa.array([json.dumps(o) for o in out] + [json.dumps(metrics)], pa.string()),
            }
        )

    return fn


def run(mode: str, name: str, args: list[str], input_path: Path) -> tuple[list[dict[str, str]], dict[str, str] | None]:
    """One vector set through Spark; returns (expected.csv-shaped rows, final metrics or None)."""
    from pyspark.sql import functions as F

    with input_path.open(newline="") as f:
        reader = csv.DictReader(f)
        fieldnames = list(reader.fieldnames or [])
        rows = list(reader)
    if mode not in ("rate", "client", "conn"):
        raise ValueError(f"mode {mode!r} has no Spark path")
    spark = _session()
    table = pa.table({**{c: pa.array([r[c] for r in rows], pa.string()) for c in fieldnames},
                      _ROW: pa.array(range(len(rows)), pa.int64())})  # fmt: skip
    df = spark.createDataFrame(table)
    group = GROUP_COLUMN.get(mode)
    df = df.withColumn("_group", F.col(group) if group else F.lit(0))
    out = (
        df.groupBy("_group")
        .applyInArrow(
            lambda t: _replay_group(mode, name, args, fieldnames)(t.drop_columns(["_group"])),
            "_row long, json string",
        )
        .toArrow()
    )
    by_row: dict[int, dict[str, str]] = {}
    metrics: dict[str, str] | None = None
    for r, text in zip(out.column(_ROW).to_pylist(), out.column("json").to_pylist(), strict=True):
        if r < 0:
            m = json.loads(text)
            if m is not None:
                metrics = {**(metrics or {}), **m}
        else:
            by_row[r] = json.loads(text)
    return [by_row[i] for i in range(len(rows))], metrics
