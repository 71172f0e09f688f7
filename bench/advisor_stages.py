"""``recommend``'s stages, timed: where the advisor's time goes (read, the per-second clients query, the
partitions' usage + decisions, the proposal), on generated traffic and bench/pipeline.py's store, two rounds in
one Spark session (the second without first-touch costs). Run::

    PYTHONPATH=src .venv/bin/python bench/advisor_stages.py --events 2000000 --master 'local[2]'
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline import make_store
from quotaflow.pipeline.generate import TrafficSpec, generate
from quotaflow.pipeline.recommend import RecommendSpec, run
from quotaflow.pipeline.session import get_session


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/quotaflow-bench-advisor-stages"))
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    events = args.workdir / f"events-{args.events}"
    if not events.exists():
        generate(TrafficSpec(events=args.events, seed=42), events)
    store = args.workdir / "quotas.db"
    if not store.exists():
        make_store(store)
    spark = get_session("local", args.master)
    try:
        for r in range(args.rounds):
            summary = run(RecommendSpec(events, store, args.workdir / "out"), spark=spark)
            print(json.dumps({"round": r + 1, "timings_s": summary.timings_s, "counts": summary.counts,
                              "load_1min": os.getloadavg()[0]}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
