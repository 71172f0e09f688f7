"""The demo runs its stages end to end and leaves its results where it says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotaflow.demo import main as demo


def test_demo_writes_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo-out"
    assert demo.main(["--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("quotaflow.db", "describe.json", "resolve.json", "changes.csv"):
        assert (out / name).exists()
        assert str((out / name).resolve()) in printed.replace("\n", "")
    described = json.loads((out / "describe.json").read_text())
    assert len(described) == len(demo.DEMO_QUOTAS)
    resolved = json.loads((out / "resolve.json").read_text())
    alice = {r["key"]: r for r in resolved if r["user"] == "alice" and r["client-id"] == "ingest"}
    assert alice["producer_byte_rate"]["level"] == 1 and alice["producer_byte_rate"]["value"] == 5_000_000.0
    # a second run starts from a fresh store
    assert demo.main(["--out", str(out)]) == 0
    assert len(json.loads((out / "describe.json").read_text())) == len(demo.DEMO_QUOTAS)
