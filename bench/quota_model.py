"""Quotas beyond Kafka's model (issue 20): resolve and per-request decision cost with 10,000 client-id prefixes and
10,000 CIDR ranges in the store vs none, in one run.

    PYTHONPATH=$PWD/src .venv/bin/python bench/quota_model.py [--n 10000] [--lookups 20000] [--out FILE]

Scenarios share one Kafka-shaped base (user, client-id, (user, client-id) and default quotas, a few ips); each adds
prefixes and/or ranges. Measured per operation, CPU time of this process (the machine is shared):

* ``resolve client``: ``QuotaIndex.resolve`` (every key's winner and what it overrides) for distinct clients;
* ``resolve ip``: ``QuotaIndex.resolve_ip``;
* ``quota-id (cold)``: the manager's quota-id lookup with its per-client cache cleared first (the prefix lookup);
* ``produce decision``: ``ClientQuotaManager.record_and_get_throttle_ms`` over 1,000 clients (cache warm, the
  steady state of the gateway);
* ``ip rate (cold)`` / ``connection decision``: ``ConnectionQuotas.connection_rate_for_ip`` with its cache cleared
  per address, and ``inc`` for distinct addresses.

Ratios are against the ``none`` scenario of the same run; the lookups must stay flat as prefixes and ranges grow
(a linear scan of 10,000 entries would be ~1,000x).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import platform
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from quotaflow.admin.local import QuotaIndex
from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.engine import QuotaManagers, QuotaType, apply_changes
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas
from quotaflow.engine.updates import snapshot_changes
from quotaflow.store.base import Snapshot

Values = dict[str, float]


def cpu_per_op(fn: Callable[[int], object], n: int) -> float:
    """CPU microseconds per call of ``fn(i)`` for i in range(n)."""
    start = time.process_time()
    for i in range(n):
        fn(i)
    return (time.process_time() - start) / n * 1e6


def base_entities() -> dict[QuotaEntity, Values]:
    out: dict[QuotaEntity, Values] = {
        QuotaEntity(user=DEFAULT): {"producer_byte_rate": 5e6, "request_percentage": 50.0},
        QuotaEntity(client_id=DEFAULT): {"producer_byte_rate": 1e6},
        QuotaEntity(ip=DEFAULT): {"connection_creation_rate": 100.0},
    }
    for i in range(200):
        out[QuotaEntity(user=f"user-{i}")] = {"producer_byte_rate": 2e6 + i}
        out[QuotaEntity(client_id=f"client-{i}")] = {"consumer_byte_rate": 3e6 + i}
        out[QuotaEntity(user=f"user-{i}", client_id=f"client-{i}")] = {"request_percentage": 10.0}
        out[QuotaEntity(ip=f"192.168.{i}.1")] = {"connection_creation_rate": 10.0}
    return out


def prefixes(n: int) -> dict[QuotaEntity, Values]:
    """``team-<i>-``, ``team-<i>-etl-`` ... : names of several lengths, as teams and their jobs name clients."""
    out: dict[QuotaEntity, Values] = {}
    for i in range(n):
        p = f"team-{i:05d}-" + ("etl-" if i % 3 == 0 else "") + ("batch-" if i % 7 == 0 else "")
        out[QuotaEntity(client_id_prefix=p)] = {"producer_byte_rate": 1e5 + i}
    return out


def ranges(n: int) -> dict[QuotaEntity, Values]:
    """/16 to /28 IPv4 ranges and /48 to /64 IPv6 ranges spread over the address space."""
    rng = random.Random(3)
    out: dict[QuotaEntity, Values] = {}
    while len(out) < n:
        if rng.random() < 0.8:
            net = ipaddress.ip_network((rng.getrandbits(32), rng.choice([16, 20, 24, 26, 28])), strict=False)
        else:
            net = ipaddress.ip_network(((0x2001_0DB8 << 96) | rng.getrandbits(96), rng.choice([48, 56, 64])),
                                       strict=False)
        out[QuotaEntity(ip=net.with_prefixlen)] = {"connection_creation_rate": float(rng.randint(1, 50))}
    return out


@dataclass
class Row:
    scenario: str
    resolve_client: float
    resolve_ip: float
    quota_id_cold: float
    produce: float
    ip_rate_cold: float
    connection: float


def run(name: str, entities: dict[QuotaEntity, Values], lookups: int) -> Row:
    index = QuotaIndex(Snapshot(1, entities))
    rng = random.Random(1)
    clients = [f"team-{rng.randrange(10_000):05d}-{'etl-' if i % 2 else ''}job-{i}" for i in range(lookups)]
    users = [f"user-{rng.randrange(400)}" for _ in range(lookups)]
    ips = [str(ipaddress.ip_address(rng.getrandbits(32))) for _ in range(lookups)]

    resolve_client = cpu_per_op(lambda i: index.resolve(users[i], clients[i]), lookups)
    resolve_ip = cpu_per_op(lambda i: index.resolve_ip(ips[i]), lookups)

    managers = QuotaManagers.create()
    conn = ConnectionQuotas(ConnectionQuotaConfig())
    conn.add_listener("PLAINTEXT")
    apply_changes(snapshot_changes(entities), managers, conn)
    produce = managers.for_type(QuotaType.PRODUCE)

    def cold(i: int) -> object:
        produce._tags.clear()  # the per-client cache is what this measures around
        return produce.quota_id(users[i], clients[i])

    quota_id_cold = cpu_per_op(cold, lookups)
    now = 1_700_000_000_000
    produce_cost = cpu_per_op(lambda i: produce.record_and_get_throttle_ms(users[i % 1000], clients[i % 1000], 1000.0,
                                                                           now + i // 10), lookups * 5)

    def ip_cold(i: int) -> int:
        conn._ip_rate_cache.clear()
        return conn.connection_rate_for_ip(ips[i])

    ip_rate_cold = cpu_per_op(ip_cold, lookups)

    def connect(i: int) -> None:
        try:
            conn.inc("PLAINTEXT", ips[i], now + i)
        except Exception:  # a throttled connection is part of the decision
            return
        conn.dec("PLAINTEXT", ips[i])

    connection = cpu_per_op(connect, lookups)
    return Row(name, resolve_client, resolve_ip, quota_id_cold, produce_cost, ip_rate_cold, connection)


def scan_baseline(n: int, lookups: int = 2_000) -> str:
    """What the indexes replace: the longest prefix / range by scanning every entry (the linear baseline)."""
    from quotaflow.core.cidr import RangeIndex
    from quotaflow.core.prefixes import PrefixIndex

    names = [str(e.client_id_prefix) for e in prefixes(n)]
    nets = [ipaddress.ip_network(str(e.ip)) for e in ranges(n)]
    rng = random.Random(2)
    clients = [f"team-{rng.randrange(n):05d}-etl-job-{i}" for i in range(lookups)]
    ips = [ipaddress.ip_address(rng.getrandbits(32)) for _ in range(lookups)]
    index = PrefixIndex(names)
    table: RangeIndex[int] = RangeIndex()
    for net in nets:
        table.set(net.with_prefixlen, 1)

    def scan_prefix(i: int) -> object:
        return max((p for p in names if clients[i].startswith(p)), key=len, default=None)

    def scan_range(i: int) -> object:
        return max((net for net in nets if ips[i] in net), key=lambda net: net.prefixlen, default=None)

    rows = [("longest prefix", cpu_per_op(scan_prefix, lookups // 10),
             cpu_per_op(lambda i: index.longest(clients[i]), lookups)),
            ("longest range", cpu_per_op(scan_range, lookups // 20),
             cpu_per_op(lambda i: table.longest(str(ips[i])), lookups))]
    out = [f"against a linear scan of {n:,} entries (CPU µs/op):", "",
           "| lookup | linear scan µs | index µs | speed-up |", "|---|---|---|---|"]
    out += [f"| {name} | {scan:.1f} | {fast:.2f} | {scan / fast:,.0f}x |" for name, scan, fast in rows]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="prefixes and ranges in the big scenarios")
    parser.add_argument("--lookups", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    base = base_entities()
    scenarios = {
        "none (Kafka's model only)": base,
        f"{args.n // 10:,} prefixes + {args.n // 10:,} ranges": {**base, **prefixes(args.n // 10),
                                                                  **ranges(args.n // 10)},
        f"{args.n:,} prefixes": {**base, **prefixes(args.n)},
        f"{args.n:,} ranges": {**base, **ranges(args.n)},
        f"{args.n:,} prefixes + {args.n:,} ranges": {**base, **prefixes(args.n), **ranges(args.n)},
    }
    rows = [run(name, entities, args.lookups) for name, entities in scenarios.items()]
    ref = rows[0]
    fields = ("resolve_client", "resolve_ip", "quota_id_cold", "produce", "ip_rate_cold", "connection")
    head = ("scenario", "resolve client µs", "resolve ip µs", "quota-id (cold) µs", "produce decision µs",
            "ip rate (cold) µs", "connection decision µs")
    lines = [
        f"quota model bench: {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}, {args.lookups:,} lookups per cell (CPU µs/op, "
        "ratio to none)",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        cells = [f"{getattr(r, f):.2f} ({getattr(r, f) / getattr(ref, f):.2f}x)" for f in fields]
        lines.append(f"| {r.scenario} | " + " | ".join(cells) + " |")
    lines += ["", scan_baseline(args.n)]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
