"""The demo's last stage: backtest the demo's own event log on Spark (local) and render the report.

Kept apart from ``quotaflow.demo`` so the demo imports Spark only when it reaches this stage.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from quotaflow.pipeline.report import build_report

BACKTEST_DIR = "backtest"
REPORT_DIR = "report"


def run(events_dir: Path, store_path: Path, out_dir: Path,
        progress: Callable[[str], None] | None = None, spark: Any = None,
        broker_config: Path | None = None) -> dict[str, Any]:
    """Backtest ``events_dir`` against the quotas in ``store_path`` into ``out_dir/backtest``, report into
    ``out_dir/report``. Returns where things are plus the backtest's counts.

    Pass the gateway's broker properties as ``broker_config`` (e.g. ``quota.window.num``) so the backtest windows
    the traffic the way the gateway did.

    Uses ``spark``, else the active session, else starts one (preset ``local``) and stops it: the demo leaves no
    JVM behind, a test keeps its shared session."""
    from quotaflow.pipeline import backtest, job
    from quotaflow.pipeline.session import session_scope

    backtest_out = out_dir / BACKTEST_DIR
    spec = job.JobSpec(events=events_dir, store=store_path, out=backtest_out, broker_config=broker_config)
    spec.validate()  # a clear error before Spark starts
    if spark is not None:
        summary = backtest.run(spec, spark=spark, progress=progress)
    else:
        with session_scope("local") as session:
            summary = backtest.run(spec, spark=session, progress=progress)
    report = build_report(backtest_out, out_dir / REPORT_DIR, progress=progress)
    return {
        "backtest": str(backtest_out),
        "report": str(report.html_path),
        "charts": [str(p) for p in report.png_paths],
        "counts": dict(summary.counts),
        "timings_s": dict(summary.timings_s),
    }
