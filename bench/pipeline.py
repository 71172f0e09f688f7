"""Pipeline benchmark: the Spark backtest and the single-process replay against their floors, end to end.

For each size N of generated events (``quotaflow generate-traffic``), in one process and one Spark session:

* spark whole     ``backtest.run``: the whole job (read, decisions written narrow, windows, entities, connections);
* spark requests  the same job over the request events only (no connections): decisions, windows, entities;
* spark decisions its decision path: read → resolve → one shuffle → ``mapInArrow`` → narrow write;
* spark floor     what Spark costs for the same shape with no decisions: read the loop's columns → repartition by
                  (broker, user) → sortWithinPartitions(ts_ms, seq) → ``mapInArrow`` identity over those columns
                  (four zero columns) → narrow write;
* replay whole    ``replay.run`` (the same job in one process); ``replay requests`` without the connections;
* replay decisions its decision path: read the loop's columns → resolve → the engine loop → narrow write;
* replay floor    read the same columns as replay does and write the narrow table with zero decisions.

Spark start-up is measured once, separately. Run::

    PYTHONPATH=src .venv/bin/python bench/pipeline.py --sizes 1000000,5000000,20000000 --master 'local[2]'
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from quotaflow.events import REQUEST_DECISION_FIELDS, REQUESTS_DIR, read_dataset
from quotaflow.pipeline import backtest, job, replay
from quotaflow.pipeline.decide import WindowSettings
from quotaflow.pipeline.generate import TrafficSpec, generate
from quotaflow.pipeline.resolve import QuotaConfig, load_config

FLOOR_COLUMNS = ("broker", "user", "ts_ms", "seq", "api_key", "acks", "is_follower", "request_bytes",
                 "response_bytes", "io_thread_ns", "network_thread_ns")  # fmt: skip


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
            (QuotaEntity(ip=DEFAULT), {"connection_creation_rate": 50.0}),
        ]
    )
    st.close()
    return path


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def spark_whole(spark: Any, events: Path, store: Path, out: Path) -> float:
    return timed(lambda: backtest.run(job.JobSpec(events, store, out), spark=spark))


def spark_decisions(spark: Any, events: Path, config: QuotaConfig, out: Path) -> float:
    def run() -> None:
        if out.exists():
            shutil.rmtree(out)
        req = backtest.read_input(spark, events, REQUESTS_DIR, out / "_in", job.DECIDE_COLUMNS)
        assert req is not None
        decided = backtest.decisions(spark, req.good, config, WindowSettings())
        decided.write.mode("overwrite").parquet(str(out / "decisions"))

    return timed(run)


def spark_floor(spark: Any, events: Path, out: Path) -> float:
    """read → repartition → sort → mapInArrow identity over the loop's columns → narrow write."""
    names = [f.name for f in REQUEST_DECISION_FIELDS]

    def identity(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            zeros = pa.array(np.zeros(b.num_rows, dtype=np.int64))
            yield pa.RecordBatch.from_arrays([b.column(0), b.column(3), *([zeros] * 4)], ["broker", "seq", *names])

    schema = "broker string, seq long, " + ", ".join(f"{n} long" for n in names)

    def run() -> None:
        df = spark.read.option("recursiveFileLookup", "true").parquet(str(events / REQUESTS_DIR))
        df = df.select(*FLOOR_COLUMNS).repartition("broker", "user").sortWithinPartitions("ts_ms", "seq")
        df.mapInArrow(identity, schema).write.mode("overwrite").parquet(str(out))

    return timed(run)


def replay_whole(events: Path, store: Path, out: Path) -> float:
    return timed(lambda: replay.run(job.JobSpec(events, store, out)))


def replay_decisions(events: Path, config: QuotaConfig, out: Path) -> float:
    def run() -> None:
        read = replay.read_requests(events, with_inputs=False)
        assert read is not None
        p = replay.prepare(read[0], config)
        decided = replay.decide(p, WindowSettings(), windows=False)
        if out.exists():
            shutil.rmtree(out)
        replay.write_parts(replay.decision_table(p, decided), out)

    return timed(run)


def replay_floor(events: Path, out: Path) -> float:
    """Read the loop's columns as replay does; write (broker, seq) + four zero columns."""

    def run() -> None:
        table = read_dataset(events, REQUESTS_DIR, dictionary=True, columns=job.DECIDE_COLUMNS)
        assert table is not None
        zeros = pa.array(np.zeros(table.num_rows, dtype=np.int64))
        narrow = table.select(list(job.DECISION_KEYS))
        for f in REQUEST_DECISION_FIELDS:
            narrow = narrow.append_column(f, zeros)
        if out.exists():
            shutil.rmtree(out)
        replay.write_parts(narrow, out)

    return timed(run)


def replay_only(sizes: list[int], w: Path, store: Path, config: QuotaConfig, repeat: int) -> None:
    """Replay's floor, decision path, requests-only job and whole job, ``repeat`` rounds per size, no Spark."""
    replay_whole(w / "events-warmup", store, w / "out-warm-r") if (w / "events-warmup").exists() else None
    print("| events | round | floor s | decisions s | decisions events/s | requests only s | whole s "
          "| requests / decisions | whole / decisions | load (1 min) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        events = w / f"events-{n}"
        if not events.exists():
            generate(TrafficSpec(events=n, seed=42), events)
        only = w / f"requests-{n}"
        only.mkdir(exist_ok=True)
        if not (only / REQUESTS_DIR).exists():
            (only / REQUESTS_DIR).symlink_to(events / REQUESTS_DIR)
        for i in range(repeat):
            load = os.getloadavg()[0]
            f = replay_floor(events, w / "out-rfloor")
            d = replay_decisions(events, config, w / "out-rd")
            r = replay_whole(only, store, w / "out-replay-req")
            a = replay_whole(events, store, w / "out-replay")
            print(f"| {n:,} | {i + 1} | {f:.2f} | {d:.2f} | {n / d:,.0f} | {r:.2f} | {a:.2f} | {r / d:.2f} | "
                  f"{a / d:.2f} | {load:.1f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,5000000,20000000")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/quotaflow-bench-pipeline"))
    ap.add_argument("--json", type=Path, default=None, help="also write the raw numbers here")
    ap.add_argument("--replay-only", action="store_true", help="replay's four timings only (no Spark)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds per size (--replay-only)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    args.workdir.mkdir(parents=True, exist_ok=True)
    store = make_store(args.workdir / "store.db")
    config = load_config(store)
    if args.replay_only:
        replay_only(sizes, args.workdir, store, config, args.repeat)
        return

    from quotaflow.pipeline.session import get_session

    t0 = time.perf_counter()
    spark = get_session("local", args.master)
    spark.range(1).count()
    startup = time.perf_counter() - t0
    print(f"spark start-up {startup:.1f} s ({args.master})", flush=True)
    rows: list[dict[str, Any]] = []
    w = args.workdir
    try:
        warm = w / "events-warmup"
        if not warm.exists():
            generate(TrafficSpec(events=50_000, seed=42), warm)
        spark_whole(spark, warm, store, w / "out-warm")  # numba cache, Python workers
        replay_whole(warm, store, w / "out-warm-r")
        for n in sizes:
            events = w / f"events-{n}"
            if not events.exists():
                t = time.perf_counter()
                generate(TrafficSpec(events=n, seed=42), events)
                print(f"generated {n} in {time.perf_counter() - t:.1f} s", flush=True)
            only = w / f"requests-{n}"  # the same request events, no connections
            only.mkdir(exist_ok=True)
            if not (only / REQUESTS_DIR).exists():
                (only / REQUESTS_DIR).symlink_to(events / REQUESTS_DIR)
            row = {"events": n, "load_before": os.getloadavg()[0]}
            row["spark_floor_s"] = spark_floor(spark, events, w / "out-floor")
            row["spark_decisions_s"] = spark_decisions(spark, events, config, w / "out-sd")
            row["spark_requests_s"] = spark_whole(spark, only, store, w / "out-spark-req")
            row["spark_whole_s"] = spark_whole(spark, events, store, w / "out-spark")
            row["replay_floor_s"] = replay_floor(events, w / "out-rfloor")
            row["replay_decisions_s"] = replay_decisions(events, config, w / "out-rd")
            row["replay_requests_s"] = replay_whole(only, store, w / "out-replay-req")
            row["replay_whole_s"] = replay_whole(events, store, w / "out-replay")
            row["load_after"] = os.getloadavg()[0]
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        spark.stop()
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Spark master {args.master}. "
        f"Spark start-up (session + first job): {startup:.1f} s, not included below.",
        "",
        "| events | Spark whole s | requests only s | decisions s | floor s | whole / floor | requests / decisions "
        "| replay whole s | requests only s | decisions s | decisions events/s | floor s | requests / decisions "
        "| Spark µs/event | replay µs/event | load (1 min) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        n = r["events"]
        lines.append(
            f"| {n:,} | {r['spark_whole_s']:.1f} | {r['spark_requests_s']:.1f} | {r['spark_decisions_s']:.1f} | "
            f"{r['spark_floor_s']:.1f} | {r['spark_whole_s'] / r['spark_floor_s']:.2f} | "
            f"{r['spark_requests_s'] / r['spark_decisions_s']:.2f} | {r['replay_whole_s']:.2f} | "
            f"{r['replay_requests_s']:.2f} | {r['replay_decisions_s']:.2f} | {n / r['replay_decisions_s']:,.0f} | "
            f"{r['replay_floor_s']:.2f} | {r['replay_requests_s'] / r['replay_decisions_s']:.2f} | "
            f"{1e6 * r['spark_whole_s'] / n:.2f} | {1e6 * r['replay_whole_s'] / n:.2f} | "
            f"{r['load_before']:.1f}–{r['load_after']:.1f} |"
        )
    print("\n".join(lines))
    if args.json is not None:
        args.json.write_text(json.dumps({"startup_s": startup, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
