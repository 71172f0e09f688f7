"""The report over real backtest/replay output (generated traffic, the shared quota stores)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.dataset as ds

from quotaflow.pipeline import job, replay
from quotaflow.pipeline.report import build_report


def test_report_on_replay_output(traffic: Path, quota_store: Path, loose_store: Path, tmp_path: Path) -> None:
    bt = tmp_path / "bt"
    replay.run(job.JobSpec(traffic, quota_store, bt, compare=loose_store))
    result = build_report(bt, tmp_path / "report")
    page = result.html_path.read_text()
    for heading in ("Summary by quota type", "Top entities", "Throttle-time distribution", "Connections",
                    "Comparison of the two configs"):
        assert heading in page
    decisions = ds.dataset(bt / "decisions").to_table(columns=["throttle_ms_produce", "throttle_ms"])
    by_type = {r["quota type"]: r for r in result.summary["throttle"]}
    for qt, col in (("produce", "throttle_ms_produce"), ("applied", "throttle_ms")):
        values = np.asarray(decisions[col])
        assert by_type[qt]["throttled"] == int((values > 0).sum())
        assert by_type[qt]["throttle ms total"] == int(values[values > 0].sum())
    assert by_type["applied"]["throttled"] > 0  # the shared store is tight enough to throttle generated traffic
    top = result.summary["top_entities"]
    assert top and top[0]["throttle_ms_sum_sum"] > 0
    assert result.summary["connections"]["connections"] == ds.dataset(bt / "connections").count_rows()
    assert "<th>requests quarantined</th>" in page  # the job's own counts from _SUMMARY.json
    assert "<th>entities_changed</th>" in page  # the comparison's totals (compare_summary/)

