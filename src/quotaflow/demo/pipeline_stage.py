"""The demo's last stage: backtest the demo's own event log on Spark (local) and render the report, then ask the
quota advisor (``quotaflow recommend``) what the demo's clients' quotas should be, in the same Spark session.

Kept apart from ``quotaflow.demo`` so the demo imports Spark only when it reaches this stage.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from quotaflow.core.entities import entity_text
from quotaflow.pipeline.report import build_report

BACKTEST_DIR = "backtest"
REPORT_DIR = "report"
ADVISOR_DIR = "advisor"
ADVISOR_REPORT_DIR = "advisor-report"
ADVISOR_LEVEL = "user,client-id"  # the demo's clients share one principal (ANONYMOUS) and hold (user, client-id) quotas


def run(events_dir: Path, store_path: Path, out_dir: Path,
        progress: Callable[[str], None] | None = None, spark: Any = None,
        broker_config: Path | None = None) -> dict[str, Any]:
    """Backtest ``events_dir`` against the quotas in ``store_path`` into ``out_dir/backtest``, report into
    ``out_dir/report``. Returns where things are plus the backtest's counts.

    Pass the gateway's broker properties as ``broker_config`` (e.g. ``quota.window.num``) so the backtest windows
    the traffic the way the gateway did.

    Uses ``spark``, else the active session, else starts one (preset ``local``) and stops it: the demo leaves no
    JVM behind, a test keeps its shared session."""
    from quotaflow.pipeline import backtest, job, recommend
    from quotaflow.pipeline.session import session_scope

    backtest_out = out_dir / BACKTEST_DIR
    spec = job.JobSpec(events=events_dir, store=store_path, out=backtest_out, broker_config=broker_config)
    spec.validate()  # a clear error before Spark starts
    advice = recommend.RecommendSpec(events_dir, store_path, out_dir / ADVISOR_DIR, ADVISOR_LEVEL,
                                     broker_config=broker_config)  # fmt: skip
    advice.validate()
    if spark is not None:
        summary = backtest.run(spec, spark=spark, progress=progress)
        recommend.run(advice, spark=spark, progress=progress)
    else:
        with session_scope("local") as session:
            summary = backtest.run(spec, spark=session, progress=progress)
            recommend.run(advice, spark=session, progress=progress)
    report = build_report(backtest_out, out_dir / REPORT_DIR, progress=progress)
    advisor_report = build_report(advice.out, out_dir / ADVISOR_REPORT_DIR, progress=progress)
    return {
        "backtest": str(backtest_out),
        "report": str(report.html_path),
        "charts": [str(p) for p in report.png_paths],
        "counts": dict(summary.counts),
        "timings_s": dict(summary.timings_s),
        "advisor": str(advice.out),
        "advisor_report": str(advisor_report.html_path),
        "proposal": proposal_rows(advice.out),
    }


def proposal_rows(advisor_out: Path) -> list[dict[str, Any]]:
    """Per entity and key of the proposal: its current quota, the proposed value, and the usage behind it."""
    import pyarrow.dataset as ds

    usage = ds.dataset(advisor_out / "usage", format="parquet").to_table().to_pylist()
    return [
        {"entity": entity_text({k: v for k, v in (("user", r["entity_user"]), ("client-id", r["entity_client_id"]))
                                if v is not None}), "key": r["key"],
         "current": r["current_limit"], "proposed": r["recommended"], "p99": r["p99"], "peak": r["peak"]}
        for r in usage
    ]  # fmt: skip
