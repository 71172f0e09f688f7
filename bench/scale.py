"""Issue 37 item 5: the scale curves, each beside its anchor, with their shape and where they break.

    .venv/bin/python bench/scale.py [--quick] [--curves idle,tenants,entities,acls,fleet,logins] [--out FILE]
                                    [--fleet-sizes 1,2,4,8]

Real processes on loopback (``quotaflow gateway`` children, tansu through ``quotaflow.testing``), each curve built
from the bench scripts that measure one point of it:

* idle: bench/idle_connections.py per N (descriptors and KB per idle client, a producer's p50/p99), gateway beside
  tansu, N up to what the host's descriptors allow. The idle clients are held by holder processes of at most
  ``--idle-per-proc`` each (each process has its own open-file limit), the gateway closing idle upstream legs after
  ``--idle-upstream-ms`` (``quotaflow.upstream.connections.max.idle.ms``) with ``max.connections`` set to N + 64, and
  measured once the legs are closed: one gateway then holds as many idle clients as its own descriptors, as a broker
  does (``--idle-per-proc 0``: the clients in this process, every leg open, as before);
* tenants: T distinct client-ids (a default client-id quota in force, so each has its own sensors) producing raw
  1 KiB Produce requests (bench/gateway_wire_latency.py's frame) at a fixed total rate over a few connections; CPU
  per request (bench/gateway_cpu.py's ``cpu_seconds``) of the gateway and, the same load sent direct, of tansu;
* entities, acls: bench/control_plane_scale.py's probes at N quota entities (no ACLs) and at N ACLs (no entities):
  a producer's worst round trip during /resolve, describe-all, one alteration, one ACL change; enforcement delay;
* fleet: 1..8 gateways with ``quotaflow.quota.scope=cluster`` on one kafka:// store and one usage topic, one
  flat-out producer per gateway with the same client-id (``quotaflow.testing.acked_rate``): usage bytes per gateway
  per second and the fleet's acked rate / Q; beside it the anchor, the same fleet with ``scope=broker`` and a fixed
  Q / N on each gateway (what Kafka's throttle admits at an even split's bound on this host);
* logins: bench/login_burst.py's burst of correct SASL/PLAIN logins at once.

The load average (1 min) is recorded at the start and end of every curve: on a shared host these are loaded-host
figures. Bounded: every curve has a fixed set of points (``--quick``: fewer, shorter).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import struct
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import control_plane_scale as cps
import idle_connections as idle
import login_burst as logins
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from gateway_cpu import cpu_seconds
from gateway_wire_latency import produce_frame

from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.store import open_store
from quotaflow.store.kafka import KafkaStore
from quotaflow.testing.acked_rate import producers
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu

FULL = {"idle": [1000, 5000, 10000, 20000], "tenants": [10, 100, 1000, 5000], "entities": [1000, 10000, 100000],
        "acls": [1000, 10000, 100000], "fleet": [1, 2, 4, 8], "logins": [100, 500, 1000, 2000]}
QUICK = {"idle": [100, 1000], "tenants": [10, 1000], "entities": [1000, 10000], "acls": [1000, 10000],
         "fleet": [1, 2], "logins": [100, 500]}
Row = dict[str, Any]


def load() -> float:
    return os.getloadavg()[0]


# -- (b) active tenants ---------------------------------------------------------------------------------------------

async def paced(port: int, frames: list[bytes], rate: float, seconds: float, conns: int) -> int:
    """Send ``frames`` round robin over ``conns`` connections at ``rate`` requests/s for ``seconds``; the number of
    responses read (every one awaited, at most 60 s after the last send)."""
    streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(conns)]
    answered = [0] * conns

    async def read(i: int, n: int) -> None:
        reader = streams[i][0]
        for _ in range(n):
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            await reader.readexactly(size)
            answered[i] += 1

    total = int(rate * seconds)
    per_conn = [len(range(i, total, conns)) for i in range(conns)]
    readers = [asyncio.create_task(read(i, per_conn[i])) for i in range(conns)]
    start = time.monotonic()
    for k in range(total):
        streams[k % conns][1].write(frames[k % len(frames)])
        if k % 10 == 9:
            await asyncio.sleep(max(0.0, start + (k + 1) / rate - time.monotonic()))
    await asyncio.wait_for(asyncio.gather(*readers), 60)
    for _, writer in streams:
        writer.close()
    return sum(answered)


def tenants_point(tansu: Tansu, gw: GatewayProcess, t: int, rate: float, seconds: float) -> Row:
    topic = f"tenants-{t}-{uuid.uuid4().hex[:6]}"
    frames = [produce_frame(topic, f"tenant-{i}") for i in range(t)]
    row: Row = {"t": t}
    for name, pid, port in (("tansu", tansu.pid, tansu.port), ("gateway", gw.pid, gw.port)):
        assert pid is not None
        warm = max(t, int(rate))  # every client-id seen once (its sensors made), the topic created
        asyncio.run(paced(port, frames, rate * 2, warm / (rate * 2), 8))
        c0 = cpu_seconds(pid)
        n = asyncio.run(paced(port, frames, rate, seconds, 8))
        row[f"{name}_us"] = (cpu_seconds(pid) - c0) / n * 1e6
        row[f"{name}_n"] = n
        row[f"{name}_rss_mb"] = idle.rss_kb(pid) / 1024
    return row


def tenants_curve(points: list[int], work: Path, quick: bool) -> list[Row]:
    rate, seconds = (500.0, 5.0) if quick else (1000.0, 10.0)
    rows = []
    for t in points:
        with Tansu() as tansu:
            store = work / f"tenants-{t}.db"
            with open_store(store) as s:  # a quota in force for every client-id: each gets its own sensors
                s.alter([(QuotaEntity(client_id=DEFAULT), {"producer_byte_rate": 1e9})])
            with GatewayProcess(tansu.bootstrap, store, work / f"gw-tenants-{t}") as gw:
                rows.append(tenants_point(tansu, gw, t, rate, seconds))
        rows[-1]["rate"] = rate
        print("tenants", rows[-1], flush=True)
    return rows


# -- (c), (d) control plane ------------------------------------------------------------------------------------------

def control_plane_curve(points: list[int], work: Path, what: str) -> list[Row]:
    rows = []
    for n in points:
        d = work / f"{what}-{n}"
        d.mkdir()
        store = d / "store.db"
        cps.populate(store, n if what == "entities" else 0, n if what == "acls" else 0)
        with Tansu() as tansu:
            r = cps.run(tansu, store, d, sys.executable, None)
        r["n"] = n
        rows.append(r)
        print(what, n, {k: v for k, v in r.items() if k != "resolve_each_ms"}, flush=True)
    return rows


# -- (e) fleet ------------------------------------------------------------------------------------------------------

FLEET_Q = 1_000_000


def usage_bytes(bootstrap: str, topic: str, start_ms: int, end_ms: int) -> tuple[int, int]:
    """(records, bytes of key + value) in ``topic`` with timestamps in [start, end)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"scale-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])  # no group: read it all
    records = size = 0
    idle_polls = 0
    try:
        while idle_polls < 5:
            m = consumer.poll(1.0)
            if m is None or m.error():
                idle_polls += 1
                continue
            idle_polls = 0
            if start_ms <= m.timestamp()[1] < end_ms:
                records += 1
                size += len(m.value() or b"") + len(m.key() or b"")
    finally:
        consumer.close()
    return records, size


def fleet_run(tansu: Tansu, n: int, work: Path, scope: str, warm: float, measure: float) -> Row:
    """N gateways, one flat-out producer each with the same client-id: with ``scope=cluster`` the client-id's
    quota is Q cluster-wide; the anchor, ``scope=broker`` with a fixed Q / N on each gateway, is what Kafka's
    throttle admits of the same producers at the bound an even split gives, on this host, at this moment."""
    tag = uuid.uuid4().hex[:6]
    usage, topic = f"usage-{n}-{tag}", f"fleet-{n}-{tag}"
    store = f"kafka://{tansu.bootstrap}/quotas-{tag}"
    quota = FLEET_Q if scope == "cluster" else FLEET_Q / n
    with KafkaStore(store) as s:
        s.alter([(QuotaEntity(client_id="shared"), {"producer_byte_rate": float(quota)})])
    config = work / f"fleet-{n}-{scope}.properties"
    config.write_text("quota.window.size.seconds=1\nquota.window.num=3\n"
                      f"quotaflow.quota.cluster.expiry.windows=2\nquotaflow.quota.scope={scope}\n"
                      f"quotaflow.quota.cluster.usage.topic={usage}\n")
    with ExitStack() as stack:
        gws = [stack.enter_context(GatewayProcess(tansu.bootstrap, store, work / f"fleet-{n}-{scope}-{i}",
                                                  extra_args=("--config", str(config))))
               for i in range(n)]
        with producers([g.bootstrap for g in gws], topic, "shared") as running:
            start = time.monotonic()
            time.sleep(warm)
            t0, w0 = time.monotonic(), time.time()
            time.sleep(measure)
            t1, w1 = time.monotonic(), time.time()
            rates = [p.rate(t0, t1) for p in running]
    row: Row = {"held": sum(rates) / FLEET_Q, "min_share": min(rates) / FLEET_Q, "max_share": max(rates) / FLEET_Q,
                "warm_s": t0 - start}
    if scope == "cluster":
        records, size = usage_bytes(tansu.bootstrap, usage, int(w0 * 1000), int(w1 * 1000))
        row |= {"usage_b_gw_s": size / n / (w1 - w0), "records_gw_s": records / n / (w1 - w0),
                "record_b": size / records if records else 0.0}
    return row


def fleet_curve(points: list[int], work: Path, quick: bool) -> list[Row]:
    warm, measure = (6.0, 9.0) if quick else (6.0, 12.0)
    rows = []
    with Tansu() as tansu:
        for n in points:
            row = {"n": n, **fleet_run(tansu, n, work, "cluster", warm, measure)}
            row["fixed_held"] = fleet_run(tansu, n, work, "broker", warm, measure)["held"]
            rows.append(row)
            print("fleet", rows[-1], flush=True)
    return rows


# -- (f) logins -----------------------------------------------------------------------------------------------------

def logins_curve(points: list[int], work: Path, users: int) -> list[Row]:
    rows = []
    with Tansu() as tansu:
        for clients in points:
            d = work / f"logins-{clients}"
            d.mkdir()
            rows.append(logins.burst(tansu, d, clients, users))
            print("logins", rows[-1], flush=True)
    return rows


# -- the report -----------------------------------------------------------------------------------------------------

def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def render_idle(rows: list[tuple[str, Row]], capped: bool) -> tuple[list[str], str]:
    table = _table(["target", "N idle", "descriptors per client", "KB per client", "p50 / p99 ms idle",
                    "p50 / p99 ms with N held", "control after"],
                   [[name, f"{int(r['n']):,}", f"{r['fds_per_client']:.2f}", f"{r['kb_per_client']:.1f}",
                     f"{r['idle_med']:.2f} / {r['idle_p99']:.2f}",
                     f"{r['held_med']:.2f} / {r['held_p99']:.2f}", f"{r['after_med']:.2f} / {r['after_p99']:.2f}"]
                    for name, r in rows])
    gw = [r for name, r in rows if name == "gateway"]
    ta = [r for name, r in rows if name == "tansu"]
    worst = max(r["held_p99"] / max(r["idle_p99"], r["after_p99"]) for r in gw)
    reading = (f"descriptors per idle client {min(r['fds_per_client'] for r in gw):.2f}–"
               f"{max(r['fds_per_client'] for r in gw):.2f} (tansu {min(r['fds_per_client'] for r in ta):.2f}–"
               f"{max(r['fds_per_client'] for r in ta):.2f}); "
               f"KB per idle client {min(r['kb_per_client'] for r in gw):.1f}–{max(r['kb_per_client'] for r in gw):.1f}"
               f" (tansu {min(r['kb_per_client'] for r in ta):.1f}–{max(r['kb_per_client'] for r in ta):.1f}); "
               f"p99 with N held / the worse of idle and control: at most {worst:.2f}x; the curve ends at "
               f"N = {int(gw[-1]['n']):,}" + (", where the host's descriptors end." if capped else "."))
    return table, reading


def render_tenants(rows: list[Row]) -> tuple[list[str], str]:
    table = _table(["client-ids", "requests/s", "gateway CPU µs / request", "tansu CPU µs / request",
                    "gateway / tansu", "gateway RSS MB after"],
                   [[f"{r['t']:,}", f"{r['rate']:.0f}", f"{r['gateway_us']:.0f}", f"{r['tansu_us']:.0f}",
                     f"{r['gateway_us'] / r['tansu_us']:.2f}x", f"{r['gateway_rss_mb']:.0f}"] for r in rows])
    first, last = rows[0], rows[-1]
    reading = (f"gateway CPU per request {first['gateway_us']:.0f} µs at {first['t']:,} client-ids -> "
               f"{last['gateway_us']:.0f} µs at {last['t']:,} ({last['gateway_us'] / first['gateway_us']:.2f}x); "
               f"tansu {first['tansu_us']:.0f} -> {last['tansu_us']:.0f} µs.")
    return table, reading


def render_control(rows: list[Row], what: str) -> tuple[list[str], str]:
    def cell(r: Row, phase: str) -> str:
        p = r[phase]
        return f"{p['worst_ms']:.0f} / {p['p99_ms']:.0f}"
    phases = (["resolve", "describe-all", "quota alteration"] if what == "entities" else ["acl change"])
    header = [what, "idle (anchor) worst / p99 ms", *(f"{p} worst / p99 ms" for p in phases)]
    if what == "entities":
        header.append("enforcement s")
    body = []
    for r in rows:
        line = [f"{r['n']:,}", cell(r, "idle"), *(cell(r, p) for p in phases)]
        if what == "entities":
            line.append(f"{r['enforcement_s']:.2f}")
        body.append(line)
    over = [(r["n"], p) for r in rows for p in phases
            if r[p]["worst_ms"] > 20 and r[p]["worst_ms"] > 2 * r["idle"]["worst_ms"]]
    if what == "entities":
        late = [r["n"] for r in rows if not r["enforcement_s"] <= 1.0]
        over += [(n, "enforcement > 1 s") for n in late]
    reading = ("no phase over 20 ms and 2x idle's worst" if not over else
               "over 20 ms and 2x idle's worst: " + ", ".join(f"{p} at {n:,}" for n, p in over))
    return _table(header, body), reading + "."


def render_fleet(rows: list[Row]) -> tuple[list[str], str]:
    table = _table(["gateways", "usage bytes / gateway / s", "usage records / gateway / s", "bytes / record",
                    "fleet acked / Q", "per-gateway min–max / Q", "anchor: fixed Q/N per gateway, acked / Q"],
                   [[str(r["n"]), f"{r['usage_b_gw_s']:.0f}", f"{r['records_gw_s']:.2f}", f"{r['record_b']:.0f}",
                     f"{r['held']:.2f}", f"{r['min_share']:.2f}–{r['max_share']:.2f}", f"{r['fixed_held']:.2f}"]
                    for r in rows])
    off = [r["n"] for r in rows if not 0.92 <= r["held"] <= 1.08]
    low = [r["n"] for r in rows if r["min_share"] < 0.1 / r["n"]]  # the floor φ·Q/N, φ = 0.1
    usage = [r["usage_b_gw_s"] for r in rows]
    held = [r["held"] for r in rows]
    reading = (f"usage per gateway {min(usage):.0f}–{max(usage):.0f} B/s;"
               f" the fleet held {min(held):.2f}–{max(held):.2f} x Q"
               + (f"; outside [0.92, 1.08] x Q at {off}" if off else "; within [0.92, 1.08] x Q at every size")
               + (f"; a gateway below the floor at {low}" if low else "; no gateway below the floor") + ".")
    return table, reading


def render_logins(rows: list[Row], users: int) -> tuple[list[str], str]:
    table = _table(["clients at once", "users", "accepted", "error 58", "closed unanswered", "burst s",
                    "all in after (rounds, s)"],
                   [[str(r["clients"]), str(r["users"]), str(r["accepted"]), str(r["error58"]), str(r["closed"]),
                     f"{r['wall_s']:.1f}", f"{r['rounds']:.0f}, {r['all_in_s']:.1f}"] for r in rows])
    refused = sum(r["error58"] for r in rows)
    reading = (f"{refused} correct logins answered error 58 in all; all in after "
               f"{rows[0]['all_in_s']:.1f} s ({rows[0]['clients']}) -> {rows[-1]['all_in_s']:.1f} s "
               f"({rows[-1]['clients']}), {users} users (one hash each).")
    return table, reading


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer points, shorter runs")
    parser.add_argument("--curves", default="idle,tenants,entities,acls,fleet,logins")
    parser.add_argument("--login-users", type=int, default=10)
    parser.add_argument("--idle-per-proc", type=int, default=9_000,
                        help="idle clients per holder process (0: all in this process, every upstream leg open)")
    parser.add_argument("--idle-upstream-ms", type=int, default=10_000,
                        help="the gateway's quotaflow.upstream.connections.max.idle.ms in the idle curve")
    parser.add_argument("--fleet-sizes", default=None, help="the fleet curve's gateway counts, e.g. 4,8")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    points = dict(QUICK if args.quick else FULL)
    if args.fleet_sizes:
        points["fleet"] = [int(n) for n in args.fleet_sizes.split(",")]
    curves = args.curves.split(",")
    unknown = set(curves) - set(FULL)
    if unknown:
        parser.error(f"unknown curves {sorted(unknown)}")
    lines = [f"# bench/scale.py{' --quick' if args.quick else ''}", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
             f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; a shared host: loaded-host figures.", ""]
    with tempfile.TemporaryDirectory(prefix="quotaflow-scale-") as tmp:
        work = Path(tmp)
        for curve in curves:
            l0, t0 = load(), time.monotonic()
            if curve == "idle":
                ns = idle.descriptors_for(points["idle"], 1 if args.idle_per_proc else 2)
                idle_rows = idle.run(ns, 100 if args.quick else 300, work, per_proc=args.idle_per_proc,
                                     upstream_idle_ms=args.idle_upstream_ms)
                capped = ns != [min(idle.MAX_CLIENTS, n) for n in points["idle"]]
                table, reading = render_idle(idle_rows, capped)
            elif curve == "tenants":
                tenant_rows = tenants_curve(points["tenants"], work, args.quick)
                table, reading = render_tenants(tenant_rows)
            elif curve in ("entities", "acls"):
                cp_rows = control_plane_curve(points[curve], work, curve)
                table, reading = render_control(cp_rows, curve)
            elif curve == "fleet":
                fleet_rows = fleet_curve(points["fleet"], work, args.quick)
                table, reading = render_fleet(fleet_rows)
            else:
                login_rows = logins_curve(points["logins"], work, args.login_users)
                table, reading = render_logins(login_rows, args.login_users)
            lines += [f"## {curve}", "", f"Load average {l0:.2f} -> {load():.2f}, {time.monotonic() - t0:.0f} s.",
                      "", *table, "", f"Reading: {reading}", ""]
            text = "\n".join(lines) + "\n"
            if args.out is not None:
                args.out.write_text(text)  # each curve kept as it finishes
    print("\n".join(lines))


if __name__ == "__main__":
    main()
