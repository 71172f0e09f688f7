"""Issue 37 item 5: how one gateway and a fleet scale, curve by curve, each point beside its anchor, in one run.

    .venv/bin/python bench/scale.py [--quick] [--curves tenants,fleet,idle,logins,control] [--out FILE]

Every point runs real processes (``quotaflow gateway``, tansu) on 127.0.0.1, bounded in count and time:

* **tenants** (anchor: tansu): N distinct client ids (10 .. 5,000), each under its own producer quota (the default
  client-id entity, 1 GB/s: a sensor per tenant, never throttling), produce 1 KiB records at a fixed total rate
  (``--rate``, 2,000 requests/s, 20 connections, each request naming its tenant in the header) through a gateway
  with its event log on, and straight to tansu: CPU per request of the gateway beside tansu's (``/proc`` utime +
  stime of every thread).
* **fleet** (anchor: the quota): K gateways (1 .. 8) with ``quotaflow.quota.scope=cluster`` on one store, a
  producer through each asking more than the quota allows; the summed acked rate over the measured seconds against
  the cluster-wide ``producer_byte_rate`` Q, and what the usage topic costs (records and bytes per gateway per
  second).
* **idle** (anchor: tansu): bench/idle_connections.py at N idle clients: KB per client and a producer's p99.
* **logins** (anchor: the burst size): bench/login_burst.py's burst of N correct logins from 16 addresses, 20 users.
* **control** (anchor: idle): bench/control_plane_scale.py at N quota entities and N ACLs: a producer's worst round
  trip during /resolve, describe-all, an ACL change and a quota alteration, and the alteration's enforcement delay.

``--quick`` runs the small end of every curve. The report is one table per curve with a line on its shape.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

sys.path.insert(0, str(Path(__file__).resolve().parent))

import control_plane_scale
import idle_connections
import login_burst
from gateway_cpu import cpu_seconds

from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.store import open_store
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu

CONNECTIONS = 20
FLEET_WARM_S = 8.0
FLEET_MIN_S = 12.0  # a fleet point is measured over at least one quota window plus (11 s by default)
RECORD = b"t" * 1024
FULL = {"tenants": [10, 100, 1_000, 5_000], "fleet": [1, 2, 4, 8], "idle": [100, 1_000, 5_000, 9_000],
        "logins": [100, 500, 1_000, 2_000], "control": [1_000, 10_000, 100_000]}
QUICK = {"tenants": [10, 1_000], "fleet": [1, 2], "idle": [100, 1_000], "logins": [100, 500],
         "control": [1_000, 10_000]}


def load() -> float:
    return os.getloadavg()[0]


def topic_on(bootstrap: str, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the topic exists
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    return name


# -- tenants -----------------------------------------------------------------------------------------------------

def produce_frames(topic: str, tenants: int) -> list[bytes]:
    """One framed Produce v9 request per tenant (client id ``tenant-<i>``), encoded once."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=None, key=None, value=RECORD, headers=[])
    builder.close()
    records = bytes(builder.buffer())
    t = ProduceRequest.TopicProduceData
    frames = []
    for i in range(tenants):
        request = ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
            t(name=topic, partition_data=[t.PartitionProduceData(index=0, records=records)])])
        request.with_header(correlation_id=1, client_id=f"tenant-{i}")
        frames.append(bytes(request.encode(version=9, header=True, framed=True)))
    return frames


def paced_load(port: int, frames: list[bytes], rate: int, seconds: float) -> int:
    """``rate`` requests/s over ``CONNECTIONS`` connections for ``seconds``, each connection one request at a time,
    tenants taken in turn across all connections; the requests answered."""
    import socket

    answered = [0] * CONNECTIONS
    per_conn = rate / CONNECTIONS
    stop_at = time.monotonic() + seconds

    def one(c: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            n, start = 0, time.monotonic()
            while True:
                due = start + n / per_conn
                now = time.monotonic()
                if now >= stop_at:
                    return
                if due > now:
                    time.sleep(due - now)
                sock.sendall(frames[(n * CONNECTIONS + c) % len(frames)])
                idle_connections._read_frame(sock)
                answered[c] += 1
                n += 1

    threads = [threading.Thread(target=one, args=(c,), daemon=True) for c in range(CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)
    return sum(answered)


def measured(pids: list[int], work: Callable[[], int]) -> tuple[int, list[float]]:
    before = [cpu_seconds(p) for p in pids]
    n = work()
    return n, [cpu_seconds(p) - b for p, b in zip(pids, before, strict=True)]


def tenants_curve(points: list[int], rate: int, seconds: float, work: Path) -> list[dict[str, Any]]:
    rows = []
    for n in points:
        with Tansu() as tansu:
            assert tansu.pid is not None
            topic = topic_on(tansu.bootstrap, "tenants")
            frames = produce_frames(topic, n)
            paced_load(tansu.port, frames, rate, 1.0)  # warm: topic metadata, first sensors
            direct, (tansu_cpu,) = measured([tansu.pid], partial(paced_load, tansu.port, frames, rate, seconds))
            store = work / f"tenants-{n}.db"
            with open_store(store) as qs:
                qs.alter([(QuotaEntity(client_id=DEFAULT), {"producer_byte_rate": 1e9})])
            gw = GatewayProcess(tansu.bootstrap, store, work / f"gw-tenants-{n}", event_log=work / f"ev-{n}").start()
            try:
                assert gw.pid is not None
                paced_load(gw.port, frames, rate, 2.0)  # warm: every tenant's sensor made
                through, (gw_cpu, behind) = measured([gw.pid, tansu.pid],
                                                     partial(paced_load, gw.port, frames, rate, seconds))
            finally:
                gw.stop()
        rows.append({"tenants": n, "direct": direct, "through": through, "tansu_us": tansu_cpu / direct * 1e6,
                     "gateway_us": gw_cpu / through * 1e6, "behind_us": behind / through * 1e6, "load": load()})
        print("tenants", rows[-1], flush=True)
    return rows


# -- fleet -------------------------------------------------------------------------------------------------------

def fleet_curve(points: list[int], quota: float, seconds: float, work: Path) -> list[dict[str, Any]]:
    rows = []
    for k in points:
        with Tansu() as tansu:
            topic = topic_on(tansu.bootstrap, "fleet")
            usage_topic = f"__quotaflow_usage_{uuid.uuid4().hex[:6]}"
            store = work / f"fleet-{k}.db"
            with open_store(store) as qs:
                qs.alter([(QuotaEntity(client_id="fleet"), {"producer_byte_rate": quota})])
            props = work / f"fleet-{k}.properties"
            props.write_text(f"quotaflow.quota.scope=cluster\nquotaflow.quota.cluster.usage.topic={usage_topic}\n")
            gateways = [GatewayProcess(tansu.bootstrap, store, work / f"gw-fleet-{k}-{i}", start_timeout=60,
                                       extra_args=("--config", str(props))) for i in range(k)]
            stop, counting = threading.Event(), threading.Event()
            acked = [0] * k
            threads: list[threading.Thread] = []
            try:
                for gw in gateways:
                    gw.start()
                threads = [threading.Thread(target=fleet_producer, daemon=True,
                                            args=(gw.bootstrap, topic, acked, i, stop, counting))
                           for i, gw in enumerate(gateways)]
                for t in threads:
                    t.start()
                time.sleep(FLEET_WARM_S)  # the first burst's throttle passes and the shares settle
                start_offsets = usage_offsets(tansu.bootstrap, usage_topic)
                counting.set()
                t0 = time.monotonic()
                time.sleep(max(seconds, FLEET_MIN_S))
                counting.clear()
                span = time.monotonic() - t0
                records, size = usage_since(tansu.bootstrap, usage_topic, start_offsets)
            finally:
                stop.set()
                for t in threads:
                    t.join(30)
                for gw in gateways:
                    gw.stop()
        rows.append({"gateways": k, "held": sum(acked) / span / quota, "split": [a / span / quota for a in acked],
                     "records_per_gw_s": records / span / k, "bytes_per_gw_s": size / span / k, "load": load()})
        print("fleet", rows[-1], flush=True)
    return rows


def fleet_producer(bootstrap: str, topic: str, acked: list[int], i: int, stop: threading.Event,
                   counting: threading.Event) -> None:
    """Produce as fast as the gateway lets it (a bounded local queue); count acked bytes while ``counting``."""
    def delivered(err: Any, msg: Any) -> None:
        if err is None and counting.is_set():
            acked[i] += len(msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "client.id": "fleet", "linger.ms": 5, "acks": 1,
                  "queue.buffering.max.messages": 200})
    while not stop.is_set():
        try:
            p.produce(topic, RECORD, on_delivery=delivered)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.purge()
    p.flush(5)


def usage_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"scale-{uuid.uuid4().hex[:6]}"})
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in meta.partitions}
    finally:
        c.close()


def usage_since(bootstrap: str, topic: str, start: dict[int, int]) -> tuple[int, int]:
    """Records and bytes (key + value) appended to the usage topic since ``start``."""
    end = usage_offsets(bootstrap, topic)
    want = sum(end[p] - start.get(p, 0) for p in end)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"scale-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, start.get(p, 0)) for p in end])
    records = size = 0
    deadline = time.monotonic() + 30
    try:
        while records < want and time.monotonic() < deadline:
            for m in c.consume(500, timeout=1.0):
                if m.error() is None and m.offset() < end[m.partition()]:
                    records += 1
                    size += len(m.key() or b"") + len(m.value() or b"")
    finally:
        c.close()
    return records, size


# -- the existing benches, at several sizes ----------------------------------------------------------------------

def idle_curve(points: list[int], work: Path) -> list[dict[str, Any]]:
    rows = []
    for name, r in idle_connections.run(points, 300, work):
        rows.append({"target": name, **r, "load": load()})
    return rows


def logins_curve(points: list[int], work: Path) -> list[dict[str, Any]]:
    rows = []
    for n in points:
        sub = work / f"login-{n}"
        sub.mkdir()
        with Tansu() as tansu:
            rows.append({**login_burst.burst(tansu, sub, n, 20), "load": load()})
        print("logins", rows[-1], flush=True)
    return rows


def control_curve(points: list[int], work: Path) -> list[dict[str, Any]]:
    rows = []
    for n in points:
        store = work / f"control-{n}.db"
        control_plane_scale.populate(store, n, n)
        sub = work / f"control-{n}"
        sub.mkdir()
        with Tansu() as tansu:
            r = control_plane_scale.run(tansu, store, sub, sys.executable, None)
        rows.append({"size": n, **{p: r[p]["worst_ms"] for p in control_plane_scale.PHASES},
                     "enforcement_s": r["enforcement_s"], "load": load()})
        print("control", rows[-1], flush=True)
    return rows


# -- report ------------------------------------------------------------------------------------------------------

def report(found: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    out = [f"# bench/scale.py — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
           f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
           f"`{' '.join(sys.argv)}`; the load average (1 min) is given per point.", ""]
    if rows := found.get("tenants"):
        out += [f"## Active tenants ({args.rate:,} requests/s, 1 KiB Produce, one quota-id each)", "",
                "| tenants | gateway µs / request | tansu µs / request (direct) | gateway / tansu | load |",
                "|---:|---:|---:|---:|---:|"]
        out += [f"| {r['tenants']:,} | {r['gateway_us']:.0f} | {r['tansu_us']:.0f} | "
                f"{r['gateway_us'] / r['tansu_us']:.2f}x | {r['load']:.1f} |" for r in rows]
        out += ["", f"Shape: gateway CPU per request from {rows[0]['gateway_us']:.0f} to "
                f"{rows[-1]['gateway_us']:.0f} µs over {rows[0]['tenants']:,} → {rows[-1]['tenants']:,} tenants.", ""]
    if rows := found.get("fleet"):
        out += [f"## Fleet size (scope=cluster, producer_byte_rate {args.quota:,.0f} B/s for the fleet)", "",
                "| gateways | acked / quota (sum) | per gateway | usage records / gateway / s "
                "| usage bytes / gateway / s | load |", "|---:|---:|---|---:|---:|---:|"]
        out += [f"| {r['gateways']} | {r['held']:.2f} | {', '.join(f'{s:.2f}' for s in r['split'])} | "
                f"{r['records_per_gw_s']:.2f} | {r['bytes_per_gw_s']:.0f} | {r['load']:.1f} |" for r in rows]
        out += [""]
    if rows := found.get("idle"):
        out += ["## Idle connections", "",
                "| target | idle clients | KB / client | producer p99 ms idle → with N | load |",
                "|---|---:|---:|---|---:|"]
        out += [f"| {r['target']} | {int(r['n']):,} | {r['kb_per_client']:.1f} | {r['idle_p99']:.2f} → "
                f"{r['held_p99']:.2f} | {r['load']:.1f} |" for r in rows]
        out += [""]
    if rows := found.get("logins"):
        out += ["## Login bursts (correct PLAIN passwords, 20 users, 16 addresses)", "",
                "| logins at once | accepted first time | error 58 | closed (retried) | all in after s | load |",
                "|---:|---:|---:|---:|---:|---:|"]
        out += [f"| {int(r['clients']):,} | {int(r['accepted']):,} | {int(r['error58'])} | {int(r['closed'])} | "
                f"{r['all_in_s']:.1f} | {r['load']:.1f} |" for r in rows]
        out += [""]
    if rows := found.get("control"):
        out += ["## Quota entities and ACLs (N of each): a producer's worst round trip, ms", "",
                "| N | " + " | ".join(control_plane_scale.PHASES) + " | enforcement s | load |",
                "|---:|" + "---:|" * (len(control_plane_scale.PHASES) + 2)]
        out += [f"| {r['size']:,} | " + " | ".join(f"{r[p]:.1f}" for p in control_plane_scale.PHASES)
                + f" | {r['enforcement_s']:.2f} | {r['load']:.1f} |" for r in rows]
        out += [""]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the small end of every curve")
    parser.add_argument("--curves", default="tenants,fleet,idle,logins,control")
    parser.add_argument("--rate", type=int, default=2_000, help="tenants: total requests/s")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per point (tenants, fleet)")
    parser.add_argument("--quota", type=float, default=2_000_000.0, help="fleet: producer_byte_rate (B/s)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    points = QUICK if args.quick else FULL
    found: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        work = Path(tmp)
        for curve in args.curves.split(","):
            sub = work / curve
            sub.mkdir()
            if curve == "tenants":
                found[curve] = tenants_curve(points[curve], args.rate, args.seconds, sub)
            elif curve == "fleet":
                found[curve] = fleet_curve(points[curve], args.quota, args.seconds, sub)
            elif curve == "idle":
                found[curve] = idle_curve(points[curve], sub)
            elif curve == "logins":
                found[curve] = logins_curve(points[curve], sub)
            elif curve == "control":
                found[curve] = control_curve(points[curve], sub)
            else:
                parser.error(f"unknown curve {curve!r}")
    text = report(found, args)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
