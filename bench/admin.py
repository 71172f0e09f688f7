"""Control-plane benchmark: alter 100k entities, describe with each filter kind, resolve 100k (user, client-id) pairs.

    .venv/bin/python bench/admin.py [--entities 100000] [--pairs 100000] [--out bench/results/admin.md]

Numbers are wall-clock on whatever machine runs it; the store is a fresh SQLite file in a temp directory.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.filters import FilterComponent, QuotaFilter
from quotaflow.store.sqlite import SqliteStore

T = TypeVar("T")
BATCH = 1000  # entities per AlterClientQuotas call (Kafka caps a request at 10000 records)


def timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    """Result, wall seconds, CPU seconds of this process (the machine is shared, so CPU time is the steadier)."""
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - start, time.process_time() - cpu


def make_entities(n: int) -> list[QuotaEntity]:
    """40% (user, client-id), 30% user, 20% client-id, 10% ip, plus every kind of default."""
    out = [QuotaEntity(user=DEFAULT), QuotaEntity(client_id=DEFAULT), QuotaEntity(user=DEFAULT, client_id=DEFAULT),
           QuotaEntity(ip=DEFAULT)]
    i = 0
    while len(out) < n:
        kind = i % 10
        if kind < 4:
            out.append(QuotaEntity(user=f"user-{i % 5000}", client_id=f"client-{i}"))
        elif kind < 7:
            out.append(QuotaEntity(user=f"user-{i}"))
        elif kind < 9:
            out.append(QuotaEntity(client_id=f"client-{i}"))
        else:
            out.append(QuotaEntity(ip=f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"))
        i += 1
    return out


def alteration(e: QuotaEntity, i: int) -> Alteration:
    if e.ip is not None:
        return Alteration.of(e, {"connection_creation_rate": float(10 + i % 90)})
    return Alteration.of(e, {"producer_byte_rate": float(1_000_000 + i), "request_percentage": 50.0})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entities", type=int, default=100_000)
    ap.add_argument("--pairs", type=int, default=100_000)
    ap.add_argument("--out", type=Path, default=Path("bench/results/admin.md"))
    args = ap.parse_args()
    rows: list[tuple[str, int, float, float]] = []

    with tempfile.TemporaryDirectory() as tmp:
        admin = Admin(SqliteStore(Path(tmp) / "bench.db"), resolver=lambda _h: True)
        entities = make_entities(args.entities)
        alts = [alteration(e, i) for i, e in enumerate(entities)]

        def alter_all() -> int:
            for start in range(0, len(alts), BATCH):
                results = admin.alter(alts[start:start + BATCH])
                assert all(r.ok for r in results)
            return admin.store.last_seq()

        seq, secs, cpu = timed(alter_all)
        rows.append((f"alter ({BATCH} entities per call, {seq} changes logged)", len(alts), secs, cpu))

        _, secs, cpu = timed(lambda: [admin.alter(alts[s:s + BATCH], validate_only=True)
                                 for s in range(0, len(alts), BATCH)])
        rows.append(("alter validate_only", len(alts), secs, cpu))

        _, secs, cpu = timed(admin.store.snapshot)
        rows.append(("store snapshot (all entities, parsed from SQLite)", 1, secs, cpu))
        _, secs, cpu = timed(admin.store.snapshot)  # the log has not moved: parsed rows are reused
        rows.append(("store snapshot (all entities, log unchanged)", 1, secs, cpu))

        filters = {
            "exact strict (user=user-0, client-id=client-0)": QuotaFilter.contains_only(
                [FilterComponent.exact("user", "user-0"), FilterComponent.exact("client-id", "client-0")]),
            "exact (user=user-4)": QuotaFilter.contains([FilterComponent.exact("user", "user-4")]),
            "exact (user=user-0)": QuotaFilter.contains([FilterComponent.exact("user", "user-0")]),
            "default (user)": QuotaFilter.contains([FilterComponent.default("user")]),
            "any strict (client-id)": QuotaFilter.contains_only([FilterComponent.any("client-id")]),
            "any (ip)": QuotaFilter.contains([FilterComponent.any("ip")]),
            "all (contains [])": QuotaFilter.all(),
        }
        reps = 3
        for name, flt in filters.items():
            found, secs, cpu = timed(lambda flt=flt: [admin.describe(flt) for _ in range(reps)][-1])
            rows.append((f"describe {name} -> {len(found)} entities", reps, secs, cpu))

        index, secs, cpu = timed(admin.index)
        rows.append(("resolve index build (per-key override maps, once per snapshot)", 1, secs, cpu))
        rng = random.Random(42)
        pairs = [(f"user-{rng.randrange(10_000)}", f"client-{rng.randrange(args.entities)}") for _ in range(args.pairs)]
        _, secs, cpu = timed(lambda: [index.resolve(u, c) for u, c in pairs])
        rows.append(("resolve (user, client-id), all 4 keys each", len(pairs), secs, cpu))
        ips = [f"10.{rng.randrange(2)}.{rng.randrange(256)}.{rng.randrange(256)}" for _ in range(args.pairs)]
        _, secs, cpu = timed(lambda: [index.resolve_ip(ip) for ip in ips])
        rows.append(("resolve ip", len(ips), secs, cpu))
        admin.close()

    lines = [
        "# Control plane: admin API over the SQLite store",
        "",
        f"Command: `.venv/bin/python bench/admin.py --entities {args.entities} --pairs {args.pairs}`",
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, {platform.system()}, "
        f"{os.cpu_count()} cores shared with other work (load average at the end: "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}). Wall time suffers from the sharing; CPU time is this "
        "process's own.",
        "",
        "| operation | count | wall s | CPU s | ms/op (CPU) | ops/s (CPU) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, count, secs, cpu in rows:
        cpu = max(cpu, 1e-9)
        lines.append(f"| {name} | {count} | {secs:.3f} | {cpu:.3f} | {1000 * cpu / count:.3f} | {count / cpu:,.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
