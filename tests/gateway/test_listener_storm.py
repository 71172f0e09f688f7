"""KIP-612 proof on real loopback sockets (slow, bounded): IP storm, broker-wide rate, live quota change.

The server (QuotaListener + echo handler) runs on the test's event loop; the load runs in a worker thread with its
own event loop, so client work does not sit in the acceptor's loop. Counting is done on the server side from the
handler's ``AcceptedConnection`` records (accept times from the engine clock); the clients check that every
survivor got its echo and every throttled attempt was closed unanswered.

Windows are ``quota.window.num=2`` x 1 s, the configuration of Kafka's ConnectionQuotasTest: with the default 11
windows a storm is admitted in bursts of a whole padded 10 s window (see docs/connection-quotas.md), which no
13-20 s average can judge.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from quotaflow.core.entities import QuotaEntity
from quotaflow.core.keys import CONNECTION_CREATION_RATE
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas
from quotaflow.gateway.listener import AcceptedConnection, ConnectionQuotaReloader, QuotaListener, wall_clock_ms
from quotaflow.store import open_store

pytestmark = pytest.mark.slow

T = TypeVar("T")
HOST = "127.0.0.1"
STORM_IP, CALM_IP, PING_IP, REPL_IP = "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"


@dataclass
class Recorder:
    """Echo handler that records every connection it is handed."""

    accepted: list[AcceptedConnection] = field(default_factory=list)

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, c: AcceptedConnection) -> None:
        self.accepted.append(c)
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()

    def count(self, ip: str, start_ms: int, end_ms: int, listener: str | None = None) -> int:
        return sum(
            1
            for c in self.accepted
            if c.client_ip == ip and start_ms <= c.accepted_ms < end_ms and listener in (None, c.listener)
        )


# -- load generators (run on the worker thread's loop) ------------------------------------------------------------
async def attempt(addr: tuple[str, int], source: str, timeout: float) -> bool:
    """Connect from ``source``, send a line, True if it is echoed (accepted), False if closed unanswered."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*addr, local_addr=(source, 0)), timeout)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(b"ping\n")
        return await asyncio.wait_for(reader.readline(), timeout) == b"ping\n"
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def storm(addr: tuple[str, int], source: str, seconds: float, in_flight: int, timeout: float = 5.0) -> list[bool]:
    """As fast as possible: ``in_flight`` workers each reconnecting as soon as their last attempt ended."""
    end = time.monotonic() + seconds
    results: list[bool] = []

    async def worker() -> None:
        while time.monotonic() < end:
            results.append(await attempt(addr, source, timeout))

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return results


async def paced(addr: tuple[str, int], source: str, seconds: float, per_second: float) -> list[bool]:
    start = time.monotonic()
    tasks: list[asyncio.Task[bool]] = []
    for i in range(int(seconds * per_second)):
        await asyncio.sleep(max(0.0, start + i / per_second - time.monotonic()))
        tasks.append(asyncio.ensure_future(attempt(addr, source, 10.0)))
    return list(await asyncio.gather(*tasks))


async def ping_loop(addr: tuple[str, int], source: str, seconds: float, interval: float) -> list[float]:
    """Request/response on one established connection; round-trip latencies in ms (inf for a failure)."""
    reader, writer = await asyncio.open_connection(*addr, local_addr=(source, 0))
    latencies: list[float] = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            t0 = time.perf_counter()
            writer.write(b"ping\n")
            try:
                ok = await asyncio.wait_for(reader.readline(), 5) == b"ping\n"
            except (OSError, TimeoutError):
                ok = False
            latencies.append((time.perf_counter() - t0) * 1000 if ok else float("inf"))
            await asyncio.sleep(interval)
    finally:
        writer.close()
    return latencies


async def on_worker_thread(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine on a fresh event loop in a worker thread, without blocking the server's loop."""

    async def wrapper() -> T:
        return await make()

    return await asyncio.to_thread(lambda: asyncio.run(wrapper()))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(body: Callable[[], Awaitable[None]], limit: float) -> None:
    asyncio.run(asyncio.wait_for(body(), limit))


def test_ip_storm_is_held_to_its_quota_while_others_proceed(record_property: Callable[[str, object], None]) -> None:
    seconds, quota = 13.0, 20

    async def body() -> None:
        quotas = ConnectionQuotas(ConnectionQuotaConfig(quota_window_num=2))
        quotas.update_ip_connection_rate_quota(STORM_IP, quota)
        quotas.update_ip_connection_rate_quota(CALM_IP, quota)
        rec = Recorder()
        listener = QuotaListener({"EXTERNAL": (HOST, 0)}, quotas, rec)
        await listener.start()
        addr = listener.addresses["EXTERNAL"]
        try:
            start_ms = wall_clock_ms()

            async def load() -> tuple[list[bool], list[bool], list[float]]:
                return await asyncio.gather(
                    storm(addr, STORM_IP, seconds, in_flight=40),
                    paced(addr, CALM_IP, seconds, per_second=4),
                    ping_loop(addr, PING_IP, seconds, interval=0.02),
                )

            storm_results, calm_results, latencies = await on_worker_thread(load)
            end_ms = start_ms + int(seconds * 1000)
        finally:
            await listener.close()

        survivors = rec.count(STORM_IP, start_ms, end_ms)
        rate = survivors / seconds
        finite = [x for x in latencies if x != float("inf")]
        report = {
            "storm_attempts": len(storm_results),
            "storm_survivors": survivors,
            "survivor_rate_per_s": round(rate, 2),
            "calm_attempts": len(calm_results),
            "calm_accepted": sum(calm_results),
            "ping_round_trips": len(latencies),
            "ping_p50_ms": round(statistics.median(finite), 2),
            "ping_p99_ms": round(percentile(finite, 0.99), 2),
            "ping_max_ms": round(max(finite), 2),
        }
        for k, v in report.items():
            record_property(k, v)
        print("ip storm:", report)
        assert len(storm_results) > 3 * quota * seconds  # it really was a storm
        assert 0.8 * quota <= rate <= 1.2 * quota
        assert sum(storm_results) == rec.count(STORM_IP, 0, 1 << 62)  # client and server agree on the survivors
        assert calm_results and all(calm_results)  # the other IP, under its quota: every connection accepted
        # the established connection kept working through the storm, no failed trip (how many trips fit in the
        # 13 s depends on the machine's load: 142 of the ideal 650 at load 18, so the floor is only "throughout")
        assert len(finite) == len(latencies) >= 2 * seconds
        assert report["ping_p50_ms"] < 100

    run(body, 60)


def test_broker_rate_limits_external_but_not_the_inter_broker_listener(
    record_property: Callable[[str, object], None],
) -> None:
    seconds, broker_rate, repl_rate = 20.0, 30, 50

    async def body() -> None:
        quotas = ConnectionQuotas(ConnectionQuotaConfig(quota_window_num=2, max_connection_creation_rate=broker_rate))
        rec = Recorder()
        listener = QuotaListener(
            {"EXTERNAL": (HOST, 0), "REPLICATION": (HOST, 0)}, quotas, rec, inter_broker_listener="REPLICATION"
        )
        await listener.start()
        ext, repl = listener.addresses["EXTERNAL"], listener.addresses["REPLICATION"]
        try:
            start_ms = wall_clock_ms()

            async def load() -> tuple[list[bool], list[bool]]:
                return await asyncio.gather(
                    storm(ext, STORM_IP, seconds, in_flight=30, timeout=15.0),
                    paced(repl, REPL_IP, seconds, per_second=repl_rate),
                )

            ext_results, repl_results = await on_worker_thread(load)
            end_ms = start_ms + int(seconds * 1000)
        finally:
            await listener.close()

        ext_rate = rec.count(STORM_IP, start_ms, end_ms, "EXTERNAL") / seconds
        repl_rate_seen = rec.count(REPL_IP, start_ms, end_ms, "REPLICATION") / seconds
        report = {
            "external_attempts": len(ext_results),
            "external_rate_per_s": round(ext_rate, 2),
            "replication_attempts": len(repl_results),
            "replication_rate_per_s": round(repl_rate_seen, 2),
            "external_blocked_ms": listener.stats["EXTERNAL"].blocked_ms,
            "replication_blocked_ms": listener.stats["REPLICATION"].blocked_ms,
        }
        for k, v in report.items():
            record_property(k, v)
        print("broker rate:", report)
        assert broker_rate - 7 <= ext_rate <= broker_rate + 7  # Kafka's ConnectionQuotasTest tolerance
        assert all(repl_results)  # never dropped
        assert listener.stats["REPLICATION"].blocked_ms == 0  # never delayed by the broker-wide limit
        assert repl_rate_seen >= 0.85 * repl_rate > broker_rate  # above the broker-wide limit
        assert listener.stats["EXTERNAL"].blocked_ms > 0.5 * seconds * 1000  # the acceptor really waited

    run(body, 60)


def test_store_quota_change_takes_effect_within_two_seconds(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    before_s, after_s, low, high = 3.0, 2.5, 5, 200

    async def body() -> None:
        db = tmp_path / "quotas.db"
        admin = open_store(db)  # the writer, as the CLI / admin API would be
        admin.alter([(QuotaEntity(ip=STORM_IP), {CONNECTION_CREATION_RATE: float(low)})])
        gateway_store = open_store(db)  # the gateway's own handle on the same file
        quotas = ConnectionQuotas(ConnectionQuotaConfig(quota_window_num=2))
        reloader = ConnectionQuotaReloader(quotas, store=gateway_store, interval_s=0.1)
        await reloader.start()
        rec = Recorder()
        listener = QuotaListener({"EXTERNAL": (HOST, 0)}, quotas, rec)
        await listener.start()
        addr = listener.addresses["EXTERNAL"]
        try:
            load = asyncio.ensure_future(on_worker_thread(lambda: storm(addr, STORM_IP, before_s + after_s, 40)))
            await asyncio.sleep(before_s)
            changed_ms = wall_clock_ms()
            await asyncio.to_thread(admin.alter, [(QuotaEntity(ip=STORM_IP), {CONNECTION_CREATION_RATE: float(high)})])
            await load
        finally:
            await listener.close()
            await reloader.close()
            gateway_store.close()
            admin.close()

        before = rec.count(STORM_IP, changed_ms - 2000, changed_ms)
        after = rec.count(STORM_IP, changed_ms, changed_ms + 2000)
        late = sorted(c.accepted_ms for c in rec.accepted if c.accepted_ms >= changed_ms)
        # Under the old quota at most ~2 windows x 5/s fit in 2 s; the 4*low-th survivor after the change proves
        # the new quota is in force.
        effect_ms = late[4 * low - 1] - changed_ms if len(late) >= 4 * low else None
        report = {"survivors_2s_before": before, "survivors_2s_after": after, "effect_ms": effect_ms}
        for k, v in report.items():
            record_property(k, v)
        print("store change:", report)
        assert before <= 3 * low
        assert after >= 100
        assert effect_ms is not None and effect_ms < 2000

    run(body, 60)
