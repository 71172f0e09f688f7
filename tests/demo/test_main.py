"""``make demo`` end to end, once: control plane, gateway in front of tansu, Spark backtest and report."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quotaflow.demo import main as demo


def test_python_m_quotaflow_demo_is_the_entry_point() -> None:
    """``make demo`` runs ``python -m quotaflow.demo``: the package's __main__ reaches main's argument parser."""
    done = subprocess.run([sys.executable, "-m", "quotaflow.demo", "--help"], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m quotaflow.demo") and "--out" in done.stdout


@pytest.mark.slow
@pytest.mark.broker
@pytest.mark.spark
def test_demo_writes_results_from_a_fresh_store(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One run (the demo reuses the active Spark session); a store left in the output directory is replaced."""
    out = tmp_path / "demo-out"
    out.mkdir()
    (out / "quotaflow.db").write_bytes(b"a store left over from an earlier run")  # must not be reused
    (out / "quotaflow.db-wal").write_bytes(b"stale")
    assert demo.main(["--out", str(out)]) == 0
    printed = capsys.readouterr().out.replace("\n", "")
    for name in ("quotaflow.db", "describe.json", "resolve.json", "changes.csv"):
        assert (out / name).exists()
        assert str((out / name).resolve()) in printed
    with sqlite3.connect(out / "quotaflow.db") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] > 0  # a real store, created by this run
    described = json.loads((out / "describe.json").read_text())
    assert len(described) == len(demo.DEMO_QUOTAS)
    resolved = json.loads((out / "resolve.json").read_text())
    alice = {r["key"]: r for r in resolved if r["user"] == "alice" and r["client-id"] == "ingest"}
    assert alice["producer_byte_rate"]["level"] == 1 and alice["producer_byte_rate"]["value"] == 5_000_000.0
    for what in ("gateway usage events (Parquet)", "backtest (Parquet)", "report (HTML)"):
        assert what in printed
    assert (out / "pipeline").is_dir() and any((out / "pipeline").rglob("*.html"))
