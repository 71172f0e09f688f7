"""Issue 10's hostile-client probes, at the issue's scale, against a `quotaflow gateway` process in front of tansu.

    .venv/bin/python bench/hardening.py [--gateway-src DIR] [--only fetch,frames,flood,outage,stalled,headers,hostile] \
        [--out bench/results/hardening.md]

``--gateway-src`` runs the gateway from another source tree (e.g. ``git archive main src | tar -x -C /tmp/before``,
then ``--gateway-src /tmp/before/src``) so the same probes give before/after figures; the probes themselves and
tansu always come from this tree. Memory and open files are read from ``/proc/<gateway pid>``. Everything is on
loopback and bounded in count and time:

* fetch: one connection pipelines 256 Fetch requests (1 MB each) and never reads; gateway RSS growth after 5 s;
* frames: on a SASL_PLAINTEXT listener, 6 unauthenticated connections announce a 100 MB frame and send 40 MB of it;
  RSS growth and how many were closed;
* flood: 16 threads (their own process) send wrong SASL/PLAIN passwords for 10 s; a real client's round trip
  (fresh login + describe + 5 acked produces, median) before and during;
* outage: tansu is killed (SIGKILL) under a kafka-python producer for 5 s, then restarted on the same port;
  connections the gateway accepted during the outage (its connection event log), warning lines logged, and whether
  everything sent during the outage was acked after it;
* stalled: 4,000 sockets from 127.0.0.1 each hold a partial frame; the gateway's extra open files;
* headers: Metadata v-1 and ApiVersions v-1: what comes back (whole response, clean close, or a hang);
* hostile: with the default settings, 1,000 connections each announce a 100 MiB frame and send 1 MiB of it (as
  fast as the gateway reads), then stall; the gateway's RSS (baseline, peak while they hold, and after the last is
  gone) and a well-behaved kafka-python producer's round trips (1 KB, acks=1: median and worst of 40, before and
  while they hold; then how long one 1 MiB produce takes while they hold), all in one run.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from statistics import median

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka.protocol.consumer import FetchRequest

from quotaflow.events import CONNECTIONS_DIR, read_dataset
from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.store import open_store
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.sasl_flood import round_trip
from quotaflow.testing.tansu import Tansu


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Run:
    def __init__(self, tansu: Tansu, work: Path, gateway_src: str | None) -> None:
        self.tansu, self.work, self.gateway_src = tansu, work, gateway_src
        self.n = 0

    def gateway(self, props: dict[str, str] | None = None, *, sasl: bool = False,
                event_log: bool = False) -> GatewayProcess:
        self.n += 1
        store = self.work / f"store-{self.n}.db"
        with open_store(store) as qs:
            qs.put_credential(hash_password("alice", "alice-secret"))
        props = dict(props or {})
        if sasl:
            props["listener.security.protocol.map"] = "PLAINTEXT:SASL_PLAINTEXT"
        config = self.work / f"gw-{self.n}.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        env_before = os.environ.get("PYTHONPATH")
        if self.gateway_src:
            os.environ["PYTHONPATH"] = self.gateway_src  # the child's source tree
        try:
            gw = GatewayProcess(self.tansu.bootstrap, store, self.work / f"gw-{self.n}",
                                event_log=self.work / f"events-{self.n}" if event_log else None,
                                extra_args=("--config", str(config)))
            return gw.start()
        finally:
            if env_before is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = env_before


def topic_with(bootstrap: str, size: int) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    for _ in range(size // 50_000):
        producer.produce(name, b"f" * 50_000)
        producer.poll(0)
    producer.flush(30)
    return name


def probe_fetch(run: Run) -> str:
    topic = topic_with(run.tansu.bootstrap, 1_200_000)
    gw = run.gateway()
    try:
        assert gw.pid is not None
        before = rss_mb(gw.pid)
        t = FetchRequest.FetchTopic
        frames = []
        for cid in range(1, 257):
            request = FetchRequest[4](replica_id=-1, max_wait_ms=10, min_bytes=1, max_bytes=1 << 20,
                                      isolation_level=0, topics=[t(topic=topic, partitions=[
                                          t.FetchPartition(partition=0, fetch_offset=0,
                                                           partition_max_bytes=1 << 20)])])
            request.with_header(correlation_id=cid, client_id="amplifier")
            frames.append(bytes(request.encode(header=True, framed=True)))
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
            s.sendall(b"".join(frames))
            time.sleep(5.0)
            after = rss_mb(gw.pid)
        return f"RSS {before:.0f} MB -> {after:.0f} MB (+{after - before:.0f} MB)"
    finally:
        gw.stop()


def probe_frames(run: Run) -> str:
    gw = run.gateway(sasl=True)
    try:
        assert gw.pid is not None
        before = rss_mb(gw.pid)
        peak = before
        closed, socks = 0, []
        for _ in range(6):
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
            socks.append(s)
            try:
                s.sendall(struct.pack(">i", 100 << 20))
                chunk, sent = b"x" * (1 << 20), 0
                while sent < 40 << 20:
                    s.sendall(chunk)
                    sent += len(chunk)
            except (ConnectionError, TimeoutError):
                closed += 1
            peak = max(peak, rss_mb(gw.pid))
        time.sleep(1.0)
        peak = max(peak, rss_mb(gw.pid))
        for s in socks:
            s.close()
        return f"closed {closed}/6 while sending; RSS {before:.0f} MB -> peak {peak:.0f} MB (+{peak - before:.0f} MB)"
    finally:
        gw.stop()


def probe_flood(run: Run) -> str:
    gw = run.gateway(sasl=True)
    address = f"127.0.0.1:{gw.port}"
    producer = KafkaProducer(bootstrap_servers=address, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="alice", sasl_plain_password="alice-secret", acks=1)

    try:
        round_trip(address, producer, 3, "bench-rt")
        baseline = round_trip(address, producer, 20, "bench-rt")
        flood = subprocess.Popen([sys.executable, "-m", "quotaflow.testing.sasl_flood", str(gw.port), "10"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        time.sleep(2.0)
        deadline = time.monotonic() + 6.0
        flooded: list[float] = []
        while time.monotonic() < deadline and len(flooded) < 20:
            flooded.append(round_trip(address, producer, 1, "bench-rt"))
        out, _ = flood.communicate(timeout=120)
        during = median(flooded)
        return (f"{out.decode().strip()} failed logins in 10 s; real round trip {baseline * 1000:.1f} ms -> "
                f"{during * 1000:.1f} ms ({during / baseline:.2f}x)")
    finally:
        producer.close(5)
        gw.stop()


def probe_outage(run: Run) -> str:
    with Tansu() as upstream:
        saved, run.tansu = run.tansu, upstream
        try:
            gw = run.gateway(event_log=True)
        finally:
            run.tansu = saved
        producer = KafkaProducer(bootstrap_servers=gw.bootstrap, acks=1, retries=100, retry_backoff_ms=200,
                                 request_timeout_ms=30_000, enable_idempotence=False)
        try:
            for f in [producer.send("outage", b"before-%d" % i) for i in range(10)]:
                f.get(timeout=30)
            assert upstream.pid is not None
            start_ms = time.time_ns() // 1_000_000
            os.kill(upstream.pid, signal.SIGKILL)
            during = [producer.send("outage", b"during-%d" % i) for i in range(20)]
            time.sleep(5.0)
            end_ms = time.time_ns() // 1_000_000
            upstream.restart()
            producer.flush(60)
            acked = sum(f.succeeded() for f in during)
        finally:
            producer.close(5)
            gw.stop()  # flushes the event log
        log_text = gw.log_path.read_text(errors="replace")
        warnings = len(re.findall(r"WARNING.*unreachable", log_text))
        conns = read_dataset(run.work / f"events-{run.n}", CONNECTIONS_DIR)
        accepted = 0
        if conns is not None:
            accepted = sum(1 for ts in conns.column("ts_ms").to_pylist() if start_ms <= ts < end_ms)
        return (f"5 s outage: {accepted} connections accepted, {warnings} warning lines; "
                f"{acked}/20 records sent during the outage acked after it")


def probe_stalled(run: Run) -> str:
    gw = run.gateway()
    socks: list[socket.socket] = []
    try:
        assert gw.pid is not None
        before = open_files(gw.pid)
        for _ in range(4000):
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
            s.sendall(struct.pack(">i", 100) + b"\x00" * 10)
            socks.append(s)
        time.sleep(2.0)
        after = open_files(gw.pid)
        return f"4,000 stalled sockets: gateway open files {before} -> {after} (+{after - before})"
    finally:
        for s in socks:
            s.close()
        gw.stop()


def probe_headers(run: Run) -> str:
    gw = run.gateway()
    out = []
    try:
        for name, key in (("Metadata", 3), ("ApiVersions", 18)):
            with socket.create_connection(("127.0.0.1", gw.port), timeout=3) as s:
                header = struct.pack(">hhih", key, -1, 7, 1) + b"x"
                s.sendall(struct.pack(">i", len(header)) + header)
                data = b""
                try:
                    while True:
                        chunk = s.recv(65536)
                        if not chunk:
                            out.append(f"{name} v-1: {'clean close' if not data else f'{len(data)} bytes then close'}")
                            break
                        data += chunk
                        if len(data) >= 4 and len(data) - 4 == struct.unpack(">i", data[:4])[0]:
                            out.append(f"{name} v-1: a whole {len(data)}-byte response")
                            break
                except TimeoutError:
                    out.append(f"{name} v-1: {len(data)} bytes ({data[:8].hex()}) then a hang")
        return "; ".join(out)
    finally:
        gw.stop()


def _hostile_senders(port: int, count: int, announce: int, send: int, stop: threading.Event,
                     gateway_pid: int, peak: list[float]) -> None:
    """``count`` sockets announce ``announce`` bytes and send ``send`` of them, as fast as the gateway takes them,
    then hold until ``stop``; the gateway's peak RSS is sampled meanwhile."""
    socks = []
    try:
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(struct.pack(">i", announce))
            s.setblocking(False)
            socks.append(s)
        chunk, sent = b"x" * 65536, [0] * count
        while not stop.is_set():
            progress = 0
            for i, s in enumerate(socks):
                if sent[i] < send:
                    try:
                        n = s.send(chunk[:send - sent[i]])
                    except (BlockingIOError, ConnectionError):
                        continue
                    sent[i] += n
                    progress += n
            peak[0] = max(peak[0], rss_mb(gateway_pid))
            if not progress:
                stop.wait(0.05)
    finally:
        for s in socks:
            s.close()


def _round_trips(producer: KafkaProducer, topic: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        producer.send(topic, b"v" * 1024).get(timeout=60)
        out.append(time.perf_counter() - t0)
    return out


def probe_hostile(run: Run) -> str:
    gw = run.gateway()
    stop = threading.Event()
    try:
        assert gw.pid is not None
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{gw.port}", acks=1, linger_ms=0,
                                 max_request_size=2 << 20, request_timeout_ms=120_000)
        _round_trips(producer, topic, 5)  # topic created, connections warm
        quiet = _round_trips(producer, topic, 40)
        base = rss_mb(gw.pid)
        peak = [base]
        senders = threading.Thread(target=_hostile_senders,
                                   args=(gw.port, 1000, 100 << 20, 1 << 20, stop, gw.pid, peak), daemon=True)
        t0 = time.monotonic()
        senders.start()
        time.sleep(8.0)  # 1,000 connections open and sending
        held = _round_trips(producer, topic, 40)
        t1 = time.perf_counter()
        producer.send(topic, b"L" * (1 << 20)).get(timeout=120)
        large = time.perf_counter() - t1
        during = time.monotonic() - t0
        peak[0] = max(peak[0], rss_mb(gw.pid))
        stop.set()
        senders.join(30)
        time.sleep(2.0)
        after = rss_mb(gw.pid)
        producer.close(5)

        def ms(xs: list[float]) -> str:
            return f"median {median(xs) * 1000:.1f} ms, worst {max(xs) * 1000:.1f} ms"

        return (f"1,000 connections announcing 100 MiB, 1 MiB sent each: RSS {base:.0f} MB -> peak {peak[0]:.0f} MB "
                f"(+{peak[0] - base:.0f} MB) -> {after:.0f} MB after; a producer's 1 KB round trip {ms(quiet)} "
                f"before, {ms(held)} while they hold; one 1 MiB produce while they hold: {large:.1f} s "
                f"(held {during:.0f} s in all)")
    finally:
        stop.set()
        gw.stop()


PROBES: dict[str, Callable[[Run], str]] = {
    "fetch": probe_fetch, "frames": probe_frames, "flood": probe_flood, "outage": probe_outage,
    "stalled": probe_stalled, "headers": probe_headers, "hostile": probe_hostile,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gateway-src", default=None, help="run the gateway from this source tree (PYTHONPATH)")
    parser.add_argument("--only", default=",".join(PROBES), help="comma-separated probes")
    parser.add_argument("--out", type=Path, default=None, help="append the figures to this Markdown file")
    args = parser.parse_args()
    lines = [f"gateway source: {args.gateway_src or 'this tree'}"]
    with tempfile.TemporaryDirectory(prefix="quotaflow-hardening-") as tmp, Tansu() as tansu:
        run = Run(tansu, Path(tmp), args.gateway_src)
        for name in args.only.split(","):
            result = PROBES[name](run)
            print(f"{name}: {result}", flush=True)
            lines.append(f"* {name}: {result}")
    if args.out is not None:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n\n")


if __name__ == "__main__":
    main()
