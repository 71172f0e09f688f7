"""Issue 37 item 2: what an idle client costs, against the gateway and against tansu, and whether a producer still
gets its round trip while they are held.

    .venv/bin/python bench/idle_connections.py [--clients 1000,5000,20000] [--rounds 500] \
        [--out bench/results/idle_connections.md]

For each N, on a fresh tansu (and a fresh ``quotaflow gateway`` process in front of another fresh tansu): a kafka-
python producer's round trips (1 KB, acks=1, ``send().get()`` one at a time: median and p99 of ``--rounds``) with no
other client; then N idle clients connect, each sends one Metadata request (so the gateway opens its upstream leg, as
after a real client's bootstrap), reads the answer and goes quiet; 3 s later (the gateway's housekeeping releases an
idle connection's buffers after 1 s) the process's RSS growth / N is the memory per idle client, and the producer's
round trips are measured again, and once more 2 s after the N closed (a control: on a shared machine the round trip
drifts with others' load, whatever the idle clients do). Clients come from 127.0.0.2-127.0.0.9 so loopback's ephemeral
ports suffice. The bench raises its own open-file limit (children inherit it) so that it, tansu and the gateway can
hold N (the gateway needs 2N + 64: max.connections defaults to what its limit allows); where the hard limit cannot be
raised, N is capped to (hard - 1024) / 2. Bounded: N <= 20,000, batches of 500, every socket closed before the next
step.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import socket
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from statistics import median, quantiles

from kafka import KafkaProducer
from kafka.protocol.metadata import MetadataRequest

from quotaflow.store import open_store
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu

MAX_CLIENTS = 20_000
BATCH = 500
SOURCES = [f"127.0.0.{i}" for i in range(2, 10)]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _metadata_frame() -> bytes:
    request = MetadataRequest[1](topics=[])
    request.with_header(correlation_id=1, client_id="idle")
    return bytes(request.encode(version=1, header=True, framed=True))


def _read_frame(sock: socket.socket) -> None:
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    got = 0
    while got < size:
        chunk = sock.recv(size - got)
        if not chunk:
            raise ConnectionError("closed")
        got += len(chunk)


def idle_clients(port: int, n: int) -> list[socket.socket]:
    """``n`` clients that each asked for Metadata once and got it, then went quiet."""
    frame = _metadata_frame()
    clients: list[socket.socket] = []
    for start in range(0, n, BATCH):
        batch = []
        for i in range(start, min(n, start + BATCH)):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.settimeout(60)
            sock.bind((SOURCES[i % len(SOURCES)], 0))
            sock.connect(("127.0.0.1", port))
            sock.sendall(frame)
            batch.append(sock)
        for sock in batch:
            _read_frame(sock)
        clients.extend(batch)
    return clients


def round_trips(bootstrap: str, rounds: int, topic: str) -> tuple[float, float]:
    """(median, p99) ms of a 1 KB acks=1 produce, one at a time."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
    try:
        for _ in range(20):  # warm up: topic created, metadata known
            producer.send(topic, b"w" * 1024).get(timeout=60)
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            producer.send(topic, b"x" * 1024).get(timeout=60)
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        producer.close(5)
    return median(times), quantiles(times, n=100)[98]


def measure(target_pid: int, port: int, bootstrap: str, n: int, rounds: int) -> dict[str, float]:
    topic = f"idle-{uuid.uuid4().hex[:8]}"
    idle_med, idle_p99 = round_trips(bootstrap, rounds, topic)
    before = rss_kb(target_pid)
    t0 = time.monotonic()
    clients = idle_clients(port, n)
    connect_s = time.monotonic() - t0
    time.sleep(3.0)
    after = rss_kb(target_pid)
    try:
        held_med, held_p99 = round_trips(bootstrap, rounds, topic)
    finally:
        for sock in clients:
            sock.close()
    time.sleep(2.0)
    after_med, after_p99 = round_trips(bootstrap, rounds, topic)  # the control: load drift, not the idle clients
    return {"after_med": after_med, "after_p99": after_p99, "n": n, "kb_per_client": (after - before) / n,
            "rss_before_mb": before / 1024, "rss_after_mb": after / 1024,
            "connect_s": connect_s, "idle_med": idle_med, "idle_p99": idle_p99, "held_med": held_med,
            "held_p99": held_p99}


def descriptors_for(ns: list[int]) -> list[int]:
    """Raise this process's open-file limit (children inherit it) so that it, tansu and a gateway can hold the
    largest N (the gateway needs 2N + 64); where the hard limit cannot be raised, each N is capped to what a gateway
    with that limit holds, (hard - 1024) / 2. Returns the Ns to run, at most ``MAX_CLIENTS`` each."""
    ns = [min(MAX_CLIENTS, n) for n in ns]
    need = 2 * max(ns) + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))  # root only: children inherit it
        except (OSError, ValueError) as e:  # no CAP_SYS_RESOURCE: N as large as the hard limit lets the gateway hold
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            ns = sorted({min(n, (hard - 1024) // 2) for n in ns})
            print(f"open-file limit {hard} ({e}): N capped to what a gateway with that limit holds: {ns}",
                  file=sys.stderr)
    else:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(need, hard)), hard))
    return ns


def run(ns: list[int], rounds: int, work: Path) -> list[tuple[str, dict[str, float]]]:
    results = []
    for n in ns:
        with Tansu() as tansu:
            assert tansu.pid is not None
            results.append(("tansu", measure(tansu.pid, tansu.port, tansu.bootstrap, n, rounds)))
            print("tansu", results[-1][1], flush=True)
        with Tansu() as tansu:
            store = work / f"idle-{n}.db"
            open_store(store).close()
            gw = GatewayProcess(tansu.bootstrap, store, work / f"gw-{n}").start()
            try:
                assert gw.pid is not None
                results.append(("gateway", measure(gw.pid, gw.port, gw.bootstrap, n, rounds)))
                print("gateway", results[-1][1], flush=True)
                log = gw.log_path.read_text(errors="replace")
                if "Too many open files" in log:
                    print("gateway log: EMFILE", flush=True)
            finally:
                gw.stop()
    return results


def report(results: list[tuple[str, dict[str, float]]], command: str) -> str:
    lines = [
        f"- Command: `{command}`",
        f"- Machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.2f} at the end",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "- Figures (RSS growth / N after the clients idled 3 s; producer 1 KB acks=1 round trips, ms):",
        "",
        "| target | N idle clients | KB per idle client | RSS before -> with N (MB) | producer median / p99 idle "
        "| with N idle clients | after they closed (control) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results:
        lines.append(f"| {name} | {int(r['n']):,} | {r['kb_per_client']:.1f} | {r['rss_before_mb']:.0f} -> "
                     f"{r['rss_after_mb']:.0f} | {r['idle_med']:.2f} / {r['idle_p99']:.2f} | "
                     f"{r['held_med']:.2f} / {r['held_p99']:.2f} | {r['after_med']:.2f} / {r['after_p99']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1000,5000,20000")
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    ns = descriptors_for([int(x) for x in args.clients.split(",")])
    with tempfile.TemporaryDirectory(prefix="quotaflow-idle-") as work:
        results = run(ns, args.rounds, Path(work))
    text = report(results, "python bench/idle_connections.py " + " ".join(sys.argv[1:]))
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
