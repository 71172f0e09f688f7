"""Per-request cost of the gateway, without a client library in the way: one raw Produce at a time.

    .venv/bin/python bench/gateway_wire_latency.py [--requests 3000] [--rounds 3] [--out FILE]

One TCP connection sends a 1 KiB-record Produce (v9, acks=1) and waits for its response, ``--requests`` times,
straight to tansu and through a ``quotaflow gateway`` subprocess (no quotas, no event log), alternating for
``--rounds`` rounds. Reports round-trip p50/p99 and the gateway process's CPU per request (from /proc), which is what
limits the gateway's request rate. Complements bench/gateway.py (throughput and latency through librdkafka).
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import struct
import tempfile
import time
from pathlib import Path

from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu


def produce_frame(topic: str, client_id: str = "bench") -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=None, key=None, value=b"x" * 1024, headers=[])
    builder.close()
    t = ProduceRequest.TopicProduceData
    request = ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        t(name=topic, partition_data=[t.PartitionProduceData(index=0, records=bytes(builder.buffer()))])])
    request.with_header(correlation_id=1, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def round_trips(address: tuple[str, int], frame: bytes, n: int) -> list[float]:
    with socket.create_connection(address) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out = []
        for _ in range(n):
            start = time.perf_counter()
            sock.sendall(frame)
            _exactly(sock, struct.unpack(">i", _exactly(sock, 4))[0])
            out.append((time.perf_counter() - start) * 1000)
        return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def pct(data: list[float], q: float) -> float:
    s = sorted(data)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    direct: list[float] = []
    through: list[float] = []
    cpu_per_request_us: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, Tansu() as tansu:
        work = Path(tmp)
        with GatewayProcess(tansu.bootstrap, work / "q.db", work) as gw:
            host, port = tansu.bootstrap.rsplit(":", 1)
            ghost, gport = gw.bootstrap.rsplit(":", 1)
            frame = produce_frame(f"lat-{time.time_ns()}")
            round_trips((host, int(port)), frame, 200)  # topic auto-creation and warm-up
            round_trips((ghost, int(gport)), frame, 200)
            for _ in range(args.rounds):
                direct += round_trips((host, int(port)), frame, args.requests)
                assert gw.pid is not None
                before = cpu_seconds(gw.pid)
                through += round_trips((ghost, int(gport)), frame, args.requests)
                cpu_per_request_us.append((cpu_seconds(gw.pid) - before) / args.requests * 1e6)
    cpu_us = sorted(cpu_per_request_us)[len(cpu_per_request_us) // 2]
    lines = [
        "# Gateway per-request cost over the raw wire (bench/gateway_wire_latency.py)",
        "",
        f"`.venv/bin/python bench/gateway_wire_latency.py --requests {args.requests} --rounds {args.rounds}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared with other jobs), Python "
        f"{platform.python_version()}. One connection, one 1 KiB-record Produce v9 (acks=1) at a time; "
        "gateway: `quotaflow gateway` subprocess, no quotas, no event log; upstream: tansu on 127.0.0.1.",
        "",
        "| path | requests | p50 ms | p99 ms |",
        "|---|---:|---:|---:|",
        f"| direct | {len(direct)} | {pct(direct, 0.5):.3f} | {pct(direct, 0.99):.3f} |",
        f"| gateway | {len(through)} | {pct(through, 0.5):.3f} | {pct(through, 0.99):.3f} |",
        "",
        f"* Added round trip: p50 **+{pct(through, 0.5) - pct(direct, 0.5):.3f} ms**, "
        f"p99 **+{pct(through, 0.99) - pct(direct, 0.99):.3f} ms**.",
        f"* Gateway CPU per request (user+system, median of rounds): **{cpu_us:.0f} µs**, i.e. about "
        f"{1e6 / cpu_us:,.0f} requests/s per core before the gateway itself is the limit.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
