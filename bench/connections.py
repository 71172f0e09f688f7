"""Connection-quota benchmarks: engine decisions, acceptor replay, and real loopback accepts through QuotaListener.

    .venv/bin/python bench/connections.py [--seconds 3]

Prints a Markdown table (one row per case). Loopback only; every case stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time

from quotaflow.core.errors import ConnectionThrottledError
from quotaflow.engine.conn_acceptor import AddListener, BrokerRate, Connect, IpRate, simulate
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas
from quotaflow.gateway.listener import AcceptedConnection, QuotaListener

T0 = 1_000_000


def engine_inc(n: int) -> tuple[str, float, str]:
    """``inc`` + ``dec`` with broker, listener and IP quotas all active (every level recorded)."""
    q = ConnectionQuotas(ConnectionQuotaConfig(max_connection_creation_rate=10**6, listener_rates={"EXTERNAL": 10**6}))
    q.add_listener("EXTERNAL")
    q.update_ip_connection_rate_quota(None, 10**6)
    ips = [f"10.0.{i // 256}.{i % 256}" for i in range(1024)]
    t = time.perf_counter()
    for i in range(n):
        ip = ips[i & 1023]
        q.inc("EXTERNAL", ip, T0 + i // 100)
        q.dec("EXTERNAL", ip)
    dt = time.perf_counter() - t
    return "engine inc+dec (broker+listener+IP quotas)", n / dt, f"{n} connections, 1024 IPs"


def engine_throttled(n: int) -> tuple[str, float, str]:
    """The IP-throttle path: record, violate, roll back three rates, raise."""
    q = ConnectionQuotas()
    q.add_listener("EXTERNAL")
    q.update_ip_connection_rate_quota("10.0.0.1", 1)
    t = time.perf_counter()
    for i in range(n):
        with contextlib.suppress(ConnectionThrottledError):
            q.inc("EXTERNAL", "10.0.0.1", T0 + i // 100)
    dt = time.perf_counter() - t
    return "engine IP-throttled connection", n / dt, f"{n} connections, quota 1/s"


def replay(n: int) -> tuple[str, float, str]:
    events = [AddListener(T0, "EXTERNAL"), AddListener(T0, "REPLICATION"), BrokerRate(T0, 200), IpRate(T0, None, 50)]
    events += [Connect(T0 + i, "EXTERNAL" if i % 4 else "REPLICATION", f"10.0.0.{i % 64}") for i in range(n)]
    t = time.perf_counter()
    simulate(ConnectionQuotas(ConnectionQuotaConfig(inter_broker_listener="REPLICATION")), events)
    dt = time.perf_counter() - t
    return "acceptor replay (conformance / backtest path)", n / dt, f"{n} connects, 2 listeners, 1 ms apart"


async def _sockets(seconds: float, ip_quota: int | None, in_flight: int) -> tuple[float, int, int]:
    quotas = ConnectionQuotas()
    if ip_quota is not None:
        quotas.update_ip_connection_rate_quota("127.0.0.2", ip_quota)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, c: AcceptedConnection) -> None:
        writer.write(b"ok\n")
        await writer.drain()
        await reader.read()

    listener = QuotaListener({"EXTERNAL": ("127.0.0.1", 0)}, quotas, handler)
    await listener.start()
    addr = listener.addresses["EXTERNAL"]
    attempts = 0

    async def client() -> None:
        nonlocal attempts
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            attempts += 1
            try:
                r, w = await asyncio.open_connection(*addr, local_addr=("127.0.0.2", 0))
            except OSError:
                continue
            with contextlib.suppress(OSError):
                await asyncio.wait_for(r.readline(), 2)
            w.close()

    t = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(in_flight)))
    dt = time.perf_counter() - t
    await listener.close()
    stats = listener.stats["EXTERNAL"]
    return attempts / dt, stats.accepted, stats.ip_throttled


def sockets(seconds: float, ip_quota: int | None) -> tuple[str, float, str]:
    rate, accepted, throttled = asyncio.run(_sockets(seconds, ip_quota, in_flight=32))
    label = "loopback connect+accept+first byte, no quota" if ip_quota is None else (
        f"loopback storm vs IP quota {ip_quota}/s (throttled held ≤1 s)"
    )
    return label, rate, f"{seconds:.0f} s, 32 clients in one process: {accepted} accepted, {throttled} IP-throttled"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    rows = [engine_inc(200_000), engine_throttled(100_000), replay(100_000), sockets(args.seconds, None),
            sockets(args.seconds, 20)]
    print("| case | per second | notes |")
    print("|---|---:|---|")
    for name, rate, note in rows:
        print(f"| {name} | {rate:,.0f} | {note} |")


if __name__ == "__main__":
    main()
