"""Pipeline benchmark: Spark backtest vs single-process replay vs the Spark identity floor, end to end.

For each size N the generated events (``quotaflow generate-traffic``) are decided three ways, each timed from
reading the Parquet input to the decisions written as Parquet:

* spark     the backtest's decision job (quarantine split, broadcast resolution, request pass, byte pass, write);
* identity  the same Spark job with the kernel replaced by zeros (same read, joins, shuffles, sorts, write);
* replay    ``quotaflow replay``'s decision path in one process (pyarrow + numpy + the same kernel);
* copy      Spark reading the events and writing them back unchanged: the cheapest Spark job that reads and
            writes every row, a lower bound for any Spark backtest on the machine (and replay's read → write
            likewise for replay).

Spark start-up is measured once, separately. Run::

    .venv/bin/python bench/pipeline.py --sizes 1000000,5000000 --master 'local[2]'
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

from quotaflow.events import REQUESTS_DIR, read_dataset, split_malformed
from quotaflow.pipeline import backtest, job, replay
from quotaflow.pipeline.decide import WindowSettings
from quotaflow.pipeline.generate import TrafficSpec, generate
from quotaflow.pipeline.resolve import QuotaConfig, load_config

ROOT = Path(__file__).resolve().parents[1]


def make_store(path: Path) -> Path:
    """A store with every precedence shape, so every quota type records and throttles."""
    from quotaflow.core.entities import DEFAULT, QuotaEntity
    from quotaflow.store import open_store

    if path.exists():
        path.unlink()
    st = open_store(path)
    st.alter(
        [
            (
                QuotaEntity(user="tenant-0000"),
                {"producer_byte_rate": 2e6, "consumer_byte_rate": 4e6, "request_percentage": 20.0},
            ),
            (QuotaEntity(user=DEFAULT), {"producer_byte_rate": 3e5, "consumer_byte_rate": 6e5}),
            (QuotaEntity(user="tenant-0003", client_id="tenant-0003-app-0"), {"producer_byte_rate": 1e5}),
            (QuotaEntity(client_id=DEFAULT), {"request_percentage": 5.0}),
        ]
    )
    st.close()
    return path


def spark_decisions(spark: Any, events: Path, config: QuotaConfig, out: Path, identity: bool) -> float:
    t0 = time.perf_counter()
    req = backtest.read_events(spark, events, REQUESTS_DIR)
    good, _ = backtest.split_malformed(req, REQUESTS_DIR)
    decided = backtest.decisions(spark, good, config, WindowSettings(), identity=identity)
    decided.drop(*[c for c in job.HELPER_COLUMNS if c in decided.columns]).write.mode("overwrite").parquet(str(out))
    return time.perf_counter() - t0


def spark_copy(spark: Any, events: Path, out: Path) -> float:
    """Spark's bare floor on this machine: read the request events and write them back as Parquet, nothing else."""
    t0 = time.perf_counter()
    spark.read.parquet(str(events / REQUESTS_DIR)).write.mode("overwrite").parquet(str(out))
    return time.perf_counter() - t0


def replay_copy(events: Path, out: Path) -> float:
    """Replay's bare floor: read the request events as replay does and write them back, nothing else."""
    t0 = time.perf_counter()
    table = read_dataset(events, REQUESTS_DIR, dictionary=True)
    assert table is not None
    if out.exists():
        shutil.rmtree(out)
    replay.write_parts(table, out)
    return time.perf_counter() - t0


def replay_decisions(events: Path, config: QuotaConfig, out: Path) -> float:
    t0 = time.perf_counter()
    table = read_dataset(events, REQUESTS_DIR, dictionary=True)  # as replay.run reads
    assert table is not None
    good, _ = split_malformed(table, REQUESTS_DIR)
    decided, _ = replay.decisions(good, config, WindowSettings())  # as replay.run: decisions written first
    if out.exists():
        shutil.rmtree(out)
    replay.write_parts(decided, out)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,5000000,20000000")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/quotaflow-bench-pipeline"))
    ap.add_argument("--batch", type=int, default=100_000, help="spark.sql.execution.arrow.maxRecordsPerBatch")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="also write the raw numbers here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    args.workdir.mkdir(parents=True, exist_ok=True)
    config = load_config(make_store(args.workdir / "store.db"))

    from quotaflow.pipeline.session import get_session

    t0 = time.perf_counter()
    spark = get_session("local", args.master, **{"spark.sql.execution.arrow.maxRecordsPerBatch": str(args.batch)})
    spark.range(1).count()
    startup = time.perf_counter() - t0
    print(f"spark start-up {startup:.1f} s ({args.master})", flush=True)
    rows: list[dict[str, Any]] = []
    try:
        warm = args.workdir / "events-warmup"
        if not warm.exists():
            generate(TrafficSpec(events=50_000, seed=42), warm)
        spark_decisions(spark, warm, config, args.workdir / "out-warm", identity=False)  # numba cache, workers
        replay_decisions(warm, config, args.workdir / "out-warm-r")
        for n in sizes:
            events = args.workdir / f"events-{n}"
            if not events.exists():
                t = time.perf_counter()
                generate(TrafficSpec(events=n, seed=42), events)
                print(f"generated {n} in {time.perf_counter() - t:.1f} s", flush=True)
            for _ in range(args.repeat):
                copy = spark_copy(spark, events, args.workdir / "out-copy")
                ident = spark_decisions(spark, events, config, args.workdir / "out-identity", identity=True)
                sp = spark_decisions(spark, events, config, args.workdir / "out-spark", identity=False)
                rp = replay_decisions(events, config, args.workdir / "out-replay")
                rcopy = replay_copy(events, args.workdir / "out-replay-copy")
                row = {
                    "events": n,
                    "spark_s": sp,
                    "identity_s": ident,
                    "replay_s": rp,
                    "copy_s": copy,
                    "replay_copy_s": rcopy,
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        spark.stop()
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Spark master {args.master}, "
        f"Arrow batch {args.batch}. Spark start-up (session + first job): {startup:.1f} s, not included below.",
        "",
        "| events | Spark backtest s | events/s | identity floor s | events/s | kernel overhead | Spark read→write s "
        "| events/s | replay s | events/s | replay read→write s | events/s | Spark µs/event | replay µs/event |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        n = r["events"]
        lines.append(
            f"| {n:,} | {r['spark_s']:.1f} | {n / r['spark_s']:,.0f} | {r['identity_s']:.1f} | "
            f"{n / r['identity_s']:,.0f} | {100 * (r['spark_s'] / r['identity_s'] - 1):+.0f} % | {r['copy_s']:.1f} | "
            f"{n / r['copy_s']:,.0f} | {r['replay_s']:.1f} | {n / r['replay_s']:,.0f} | {r['replay_copy_s']:.2f} | "
            f"{n / r['replay_copy_s']:,.0f} | {1e6 * r['spark_s'] / n:.2f} | {1e6 * r['replay_s'] / n:.2f} |"
        )
    print("\n".join(lines))
    if args.json is not None:
        args.json.write_text(json.dumps({"startup_s": startup, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
