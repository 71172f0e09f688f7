"""The pipeline stage of ``make demo``: a Spark backtest of an events directory, then the HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from quotaflow.demo import pipeline_stage


@pytest.mark.spark
def test_pipeline_stage_backtests_on_spark_and_reports(spark: Any, traffic: Path, quota_store: Path,
                                                       tmp_path: Path) -> None:
    steps: list[str] = []
    props = tmp_path / "broker.properties"  # the demo gateway's window settings
    props.write_text("quota.window.num=3\nquota.window.size.seconds=1\n")
    where = pipeline_stage.run(traffic, quota_store, tmp_path / "demo", progress=steps.append, spark=spark,
                               broker_config=props)
    assert Path(where["report"]).is_file() and Path(where["report"]).name == "report.html"
    assert [Path(p).name for p in where["charts"]] == ["rate_vs_quota.png", "throttle_distribution.png",
                                                       "connections.png"]
    assert where["counts"]["requests"] == ds.dataset(traffic / "requests").count_rows()
    assert "decisions" in steps and "writing HTML" in steps  # both the backtest and the report reported progress
    assert spark.range(1).count() == 1  # the shared session was not stopped
    # the advisor ran on the same events: a proposal per client-id, the report beside it
    assert Path(where["advisor_report"]).is_file() and (Path(where["advisor"]) / "proposal.json").is_file()
    assert {r["key"] for r in where["proposal"]} == {"producer_byte_rate", "consumer_byte_rate", "request_percentage"}
    assert all(r["proposed"] >= 1.0 for r in where["proposal"])
