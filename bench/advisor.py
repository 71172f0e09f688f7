"""Advisor benchmark: ``quotaflow recommend`` against the existing Spark backtest of the same events.

For each size N of generated events (``quotaflow generate-traffic``, seed 42), in one process and one Spark session,
``--rounds`` rounds of, alternating:

* backtest         ``backtest.run`` over the same events (read, decisions written narrow, windows, entities,
                   connections): the baseline the issue names;
* backtest req     the same over the request events only (the advisor reads no connection events);
* recommend        ``recommend.run`` (entity type ``user``, all three keys): one read, usage and percentiles,
                   decisions under the store's quotas *and* under the proposal in the same loop, both written,
                   windows, compare, usage, outcome, proposal.json.

The store is bench/pipeline.py's (every precedence shape). Spark start-up is measured once, not included. Run::

    PYTHONPATH=src .venv/bin/python bench/advisor.py --sizes 20000000 --master 'local[2]'
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline import make_store, timed
from quotaflow.events import REQUESTS_DIR
from quotaflow.pipeline import backtest, job, recommend
from quotaflow.pipeline.generate import TrafficSpec, generate


def run_backtest(spark: Any, events: Path, store: Path, out: Path) -> float:
    return timed(lambda: backtest.run(job.JobSpec(events, store, out), spark=spark))


def run_recommend(spark: Any, events: Path, store: Path, out: Path) -> float:
    return timed(lambda: recommend.run(recommend.RecommendSpec(events, store, out, "user"), spark=spark))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="20000000")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/quotaflow-bench-pipeline"))
    ap.add_argument("--json", type=Path, default=None, help="also write the raw numbers here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    w: Path = args.workdir
    w.mkdir(parents=True, exist_ok=True)
    store = make_store(w / "advisor-store.db")

    from quotaflow.pipeline.session import get_session

    t0 = time.perf_counter()
    spark = get_session("local", args.master)
    spark.range(1).count()
    startup = time.perf_counter() - t0
    print(f"spark start-up {startup:.1f} s ({args.master})", flush=True)
    rows: list[dict[str, Any]] = []
    try:
        warm = w / "events-warmup"
        if not warm.exists():
            generate(TrafficSpec(events=50_000, seed=42), warm)
        run_backtest(spark, warm, store, w / "adv-warm-b")  # numba cache, Python workers
        run_recommend(spark, warm, store, w / "adv-warm-r")
        for n in sizes:
            events = w / f"events-{n}"
            if not events.exists():
                t = time.perf_counter()
                generate(TrafficSpec(events=n, seed=42), events)
                print(f"generated {n} in {time.perf_counter() - t:.1f} s", flush=True)
            only = w / f"requests-{n}"
            only.mkdir(exist_ok=True)
            if not (only / REQUESTS_DIR).exists():
                (only / REQUESTS_DIR).symlink_to(events / REQUESTS_DIR)
            for i in range(args.rounds):
                row: dict[str, Any] = {"events": n, "round": i + 1, "load_before": os.getloadavg()[0]}
                row["backtest_s"] = run_backtest(spark, events, store, w / "adv-out-b")
                row["backtest_requests_s"] = run_backtest(spark, only, store, w / "adv-out-bq")
                row["recommend_s"] = run_recommend(spark, events, store, w / "adv-out-r")
                row["load_after"] = os.getloadavg()[0]
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        spark.stop()
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Spark master {args.master}. "
        f"Spark start-up {startup:.1f} s, not included.",
        "",
        "| events | round | backtest s | backtest (requests only) s | recommend s | recommend / backtest "
        "| recommend / backtest (requests only) | load (1 min) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['events']:,} | {r['round']} | {r['backtest_s']:.1f} | {r['backtest_requests_s']:.1f} | "
            f"{r['recommend_s']:.1f} | {r['recommend_s'] / r['backtest_s']:.2f} | "
            f"{r['recommend_s'] / r['backtest_requests_s']:.2f} | {r['load_before']:.1f}–{r['load_after']:.1f} |"
        )
    print("\n".join(lines))
    if args.json is not None:
        args.json.write_text(json.dumps({"startup_s": startup, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
