"""Direct vs through the gateway, plaintext vs TLS: CPU per request of the gateway and of the broker, added latency
at moderate load, flat-out throughput. All paths in one run, on one gateway process and one broker.

    .venv/bin/python bench/gateway_tls.py [--requests 5000] [--rounds 3] [--window 32] [--out FILE]

Paths: ``direct`` (client -> tansu, plaintext), ``gateway`` (client -> gateway PLAINTEXT listener -> tansu) and
``gateway-tls`` (client -> gateway SSL listener, TLS 1.3 with a trustme certificate -> tansu). tansu 0.6.0 cannot
serve TLS (its ``--cert`` / ``--key`` flags conflict), so the upstream leg is plaintext in every path.

* **latency** (moderate load): one connection, one 1 KiB-record Produce v9 (acks=1) at a time, ``--requests`` per
  round; p50 / p99 round trip, and the added p50 / p99 against direct.
* **CPU per request**: user+system CPU (from /proc) of the gateway process and of the tansu process during the
  latency rounds, divided by the requests.
* **throughput** (flat out): one connection with ``--window`` requests in flight, ``--requests`` requests; requests
  per second. The rounds alternate the paths, so machine noise spreads over all of them.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import socket
import ssl
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trustme

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway_wire_latency import cpu_seconds, pct, produce_frame

from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu

Connect = Callable[[], socket.socket]


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def _response(sock: socket.socket) -> None:
    _exactly(sock, struct.unpack(">i", _exactly(sock, 4))[0])


def one_at_a_time(connect: Connect, frame: bytes, n: int) -> list[float]:
    with connect() as sock:
        out = []
        for _ in range(n):
            start = time.perf_counter()
            sock.sendall(frame)
            _response(sock)
            out.append((time.perf_counter() - start) * 1000)
        return out


def flat_out(connect: Connect, frame: bytes, n: int, window: int) -> float:
    """Requests per second with ``window`` requests in flight on one connection."""
    with connect() as sock:
        start = time.perf_counter()
        sent = received = 0
        while received < n:
            while sent < n and sent - received < window:
                sock.sendall(frame)
                sent += 1
            _response(sock)
            received += 1
        return n / (time.perf_counter() - start)


def plain(address: tuple[str, int]) -> Connect:
    def connect() -> socket.socket:
        sock = socket.create_connection(address)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    return connect


def tls(address: tuple[str, int], context: ssl.SSLContext) -> Connect:
    def connect() -> socket.socket:
        return context.wrap_socket(plain(address)(), server_hostname=address[0])
    return connect


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    paths = ("direct", "gateway", "gateway-tls")
    latency: dict[str, list[float]] = {p: [] for p in paths}
    gateway_cpu: dict[str, list[float]] = {p: [] for p in paths}
    broker_cpu: dict[str, list[float]] = {p: [] for p in paths}
    throughput: dict[str, list[float]] = {p: [] for p in paths}
    with tempfile.TemporaryDirectory() as tmp, Tansu() as tansu:
        work = Path(tmp)
        ca = trustme.CA()
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(work / "server.pem"))
        (work / "gateway.properties").write_text("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL\n"
                                                 f"ssl.keystore.location={work / 'server.pem'}\n")
        client_context = ssl.create_default_context()
        ca.configure_trust(client_context)
        extra = ("--listen", "SSL=127.0.0.1:0", "--config", str(work / "gateway.properties"))
        with GatewayProcess(tansu.bootstrap, work / "q.db", work, extra_args=extra) as gw:
            found = re.search(r"SSL=127\.0\.0\.1:(\d+)", gw.log_path.read_text())
            assert found and gw.pid is not None and tansu.pid is not None
            host, port = tansu.bootstrap.rsplit(":", 1)
            connects = {
                "direct": plain((host, int(port))),
                "gateway": plain(("127.0.0.1", gw.port)),
                "gateway-tls": tls(("127.0.0.1", int(found.group(1))), client_context),
            }
            frame = produce_frame(f"tls-{time.time_ns()}")
            for connect in connects.values():  # topic auto-creation and warm-up
                one_at_a_time(connect, frame, 200)
            for _ in range(args.rounds):
                for path, connect in connects.items():
                    g0, b0 = cpu_seconds(gw.pid), cpu_seconds(tansu.pid)
                    latency[path] += one_at_a_time(connect, frame, args.requests)
                    gateway_cpu[path].append((cpu_seconds(gw.pid) - g0) / args.requests * 1e6)
                    broker_cpu[path].append((cpu_seconds(tansu.pid) - b0) / args.requests * 1e6)
                for path, connect in connects.items():
                    throughput[path].append(flat_out(connect, frame, args.requests, args.window))

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    d50, d99 = pct(latency["direct"], 0.5), pct(latency["direct"], 0.99)
    lines = [
        "## Gateway: direct vs plaintext vs TLS (bench/gateway_tls.py)",
        "",
        f"`.venv/bin/python bench/gateway_tls.py --requests {args.requests} --rounds {args.rounds} "
        f"--window {args.window}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared with other jobs), Python "
        f"{platform.python_version()}, OpenSSL {ssl.OPENSSL_VERSION.split()[1]}. One 1 KiB-record Produce v9 "
        "(acks=1); gateway: `quotaflow gateway` subprocess (PLAINTEXT and SSL listeners, no quotas, no event log); "
        "upstream: tansu on 127.0.0.1 (plaintext). CPU figures are medians over the rounds; latency over all requests.",
        "",
        "| path | p50 ms | p99 ms | added p50 ms | added p99 ms | gateway CPU µs/req | broker CPU µs/req "
        "| flat-out req/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for path in paths:
        p50, p99 = pct(latency[path], 0.5), pct(latency[path], 0.99)
        lines.append(f"| {path} | {p50:.3f} | {p99:.3f} | {p50 - d50:+.3f} | {p99 - d99:+.3f} | "
                     f"{median(gateway_cpu[path]):.0f} | {median(broker_cpu[path]):.0f} | "
                     f"{median(throughput[path]):,.0f} |")
    g_plain, g_tls = median(gateway_cpu["gateway"]), median(gateway_cpu["gateway-tls"])
    broker = median(broker_cpu["direct"])
    lines += [
        "",
        f"* Gateway CPU per request vs the broker's own: plaintext {g_plain / broker:.2f}x, TLS {g_tls / broker:.2f}x "
        f"(TLS adds {g_tls - g_plain:.0f} µs per request at the gateway).",
        f"* Flat-out throughput vs direct: plaintext "
        f"{median(throughput['gateway']) / median(throughput['direct']):.0%}, TLS "
        f"{median(throughput['gateway-tls']) / median(throughput['direct']):.0%}.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
