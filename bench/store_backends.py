"""The quota store's two backends side by side: SQLite (the baseline, the embedded default) and ``kafka://`` on a
real tansu broker on loopback, in one process run.

    .venv/bin/python bench/store_backends.py [--entities 2000] [--alters 200] [--out bench/results/store.md]

What each operation costs a caller: an alter (one entity; the Kafka store returns once its own view has applied
the record), a batch alter, a snapshot and a credential lookup (the gateway's hot reads: the Kafka store answers
from memory), opening a store (the Kafka store replays the topic), and how long an alter through one store takes
to be visible through another (the fleet's propagation delay). Wall clock on a shared machine.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quotaflow.core.entities import QuotaEntity
from quotaflow.store import open_store
from quotaflow.store.base import Credential

Row = tuple[str, str, float, float]  # operation, backend, value, ratio to SQLite


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.99) - 1] * 1000


def _each(n: int, fn: Callable[[int], Any]) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - start)
    return out


def measure(url: str, entities: int, alters: int) -> dict[str, float]:
    res: dict[str, float] = {}
    store: Any = open_store(url)
    try:
        batch = [(QuotaEntity(user=f"u{i}"), {"producer_byte_rate": float(i + 1)}) for i in range(entities)]
        start = time.perf_counter()
        store.alter(batch)
        res["alter batch (entities/s)"] = entities / (time.perf_counter() - start)
        p50, p99 = _ms(_each(alters, lambda i: store.alter([(QuotaEntity(client_id="c"),
                                                               {"consumer_byte_rate": float(i + 1)})])))
        res["alter one entity p50 (ms)"], res["alter one entity p99 (ms)"] = p50, p99
        p50, _ = _ms(_each(20, lambda _i: store.snapshot()))
        res[f"snapshot of {entities + 1} entities p50 (ms)"] = p50
        store.put_credential(Credential("alice", b"s" * 16, 1000, b"k" * 64))
        p50, _ = _ms(_each(5000, lambda _i: store.get_credential("alice")))
        res["get_credential p50 (us)"] = p50 * 1000
        start = time.perf_counter()
        other: Any = open_store(url)
        res[f"open (catch up on {entities + alters + 1} records) (ms)"] = (time.perf_counter() - start) * 1000
        try:
            lags = []
            for i in range(50):
                value = float(10_000 + i)
                start = time.perf_counter()
                store.alter([(QuotaEntity(client_id="seen"), {"producer_byte_rate": value})])
                while other.get(QuotaEntity(client_id="seen")).get("producer_byte_rate") != value:
                    time.sleep(0.001)
                lags.append(time.perf_counter() - start)
            p50, p99 = _ms(lags)
            res["alter here -> visible there p50 (ms)"], res["alter here -> visible there p99 (ms)"] = p50, p99
        finally:
            other.close()
    finally:
        store.close()
    return res


def main() -> None:
    warnings.simplefilter("ignore", DeprecationWarning)
    from quotaflow.testing.tansu import Tansu

    parser = argparse.ArgumentParser()
    parser.add_argument("--entities", type=int, default=2000)
    parser.add_argument("--alters", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Tansu() as tansu:
        sqlite = measure(str(Path(tmp) / "q.db"), args.entities, args.alters)
        kafka = measure(f"kafka://{tansu.bootstrap}/bench-store", args.entities, args.alters)
    lines = [
        "Command: `.venv/bin/python bench/store_backends.py "
        f"--entities {args.entities} --alters {args.alters}`",
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, {platform.system()} (wall clock; "
        "the SQLite file on local disk, tansu with memory storage on loopback)",
        "",
        "| operation | SQLite (baseline) | kafka:// (tansu) | kafka / SQLite |",
        "|---|---:|---:|---:|",
    ]
    for key, base in sqlite.items():
        lines.append(f"| {key} | {base:,.2f} | {kafka[key]:,.2f} | {kafka[key] / base:.2f}× |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
