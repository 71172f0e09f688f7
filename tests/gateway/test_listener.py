"""QuotaListener on real loopback sockets: acceptor delay, IP hold-then-close, count limits, live reload."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.keys import CONNECTION_CREATION_RATE
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas
from quotaflow.gateway.listener import AcceptedConnection, ConnectionQuotaReloader, QuotaListener
from quotaflow.store import open_store

HOST = "127.0.0.1"


class Echo:
    """Handler: echoes lines; remembers what it was handed."""

    def __init__(self) -> None:
        self.accepted: list[AcceptedConnection] = []

    async def __call__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: AcceptedConnection
    ) -> None:
        self.accepted.append(conn)
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()


async def started(
    quotas: ConnectionQuotas, handler: Echo, names: tuple[str, ...] = ("EXTERNAL",), **kw: object
) -> QuotaListener:
    listener = QuotaListener({n: (HOST, 0) for n in names}, quotas, handler, **kw)  # type: ignore[arg-type]
    await listener.start()
    return listener


async def connect(
    listener: QuotaListener, name: str = "EXTERNAL", source: str = "127.0.0.1"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = listener.addresses[name]
    return await asyncio.open_connection(host, port, local_addr=(source, 0))


async def ping(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float = 5.0) -> bytes:
    writer.write(b"ping\n")
    await writer.drain()
    return await asyncio.wait_for(reader.readline(), timeout)


async def closed_without_answer(reader: asyncio.StreamReader) -> bool:
    """The server closed the socket without answering: EOF, or a reset because our ping was never read."""
    try:
        return await asyncio.wait_for(reader.read(), 5) == b""
    except ConnectionResetError:
        return True


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def run(coro: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(coro(), 30))


def test_accepts_serves_and_releases_counts() -> None:
    async def body() -> None:
        quotas, echo = ConnectionQuotas(), Echo()
        listener = await started(quotas, echo)
        try:
            reader, writer = await connect(listener, source="127.0.0.4")
            assert await ping(reader, writer) == b"ping\n"
            assert quotas.get("127.0.0.4") == 1 and echo.accepted[0].client_ip == "127.0.0.4"
            assert echo.accepted[0].listener == "EXTERNAL"
            writer.close()
            await eventually(lambda: quotas.get("127.0.0.4") == 0)
            assert quotas.total_count == 0
        finally:
            await listener.close()

    run(body)


def test_ip_throttled_socket_is_held_then_closed_never_handed_over() -> None:
    async def body() -> None:
        quotas, echo = ConnectionQuotas(ConnectionQuotaConfig(quota_window_num=2)), Echo()
        quotas.update_ip_connection_rate_quota("127.0.0.2", 0)
        listener = await started(quotas, echo)
        try:
            reader, writer = await connect(listener, source="127.0.0.2")
            t0 = time.monotonic()
            writer.write(b"ping\n")
            assert await closed_without_answer(reader)
            held = time.monotonic() - t0
            assert 0.8 <= held <= 3.0  # throttle = one quota window (1000 ms)
            assert echo.accepted == [] and quotas.total_count == 0
            assert listener.stats["EXTERNAL"].ip_throttled == 1
            reader2, writer2 = await connect(listener, source="127.0.0.3")  # another IP is unaffected
            assert await ping(reader2, writer2) == b"ping\n"
            writer2.close()
        finally:
            await listener.close()

    run(body)


def test_broker_rate_delays_the_acceptor_and_never_drops() -> None:
    async def body() -> None:
        quotas = ConnectionQuotas(ConnectionQuotaConfig(quota_window_num=2, max_connection_creation_rate=1))
        echo = Echo()
        listener = await started(quotas, echo)
        try:
            conns = [await connect(listener) for _ in range(3)]  # the 2nd and 3rd wait in the OS backlog
            answers = await asyncio.gather(*(ping(r, w, timeout=10) for r, w in conns))
            assert answers == [b"ping\n"] * 3
            times = sorted(c.accepted_ms for c in echo.accepted)
            assert times[1] - times[0] >= 900  # 2 connections in a 1 s window vs 1/s: a 1000 ms delay
            assert times[2] - times[1] >= 900
            assert listener.stats["EXTERNAL"].blocked_ms >= 1800
            for _, w in conns:
                w.close()
        finally:
            await listener.close()

    run(body)


def test_max_connections_per_ip_closes_the_extra_connection() -> None:
    async def body() -> None:
        quotas = ConnectionQuotas(ConnectionQuotaConfig(max_connections_per_ip=1))
        listener = await started(quotas, Echo())
        try:
            r1, w1 = await connect(listener)
            assert await ping(r1, w1) == b"ping\n"
            r2, w2 = await connect(listener)
            w2.write(b"ping\n")
            assert await closed_without_answer(r2)
            assert listener.stats["EXTERNAL"].too_many == 1 and quotas.get(HOST) == 1
            w1.close()
            await eventually(lambda: quotas.get(HOST) == 0)
            r3, w3 = await connect(listener)
            assert await ping(r3, w3) == b"ping\n"
            w3.close()
        finally:
            await listener.close()

    run(body)


def test_broker_max_connections_makes_the_acceptor_wait_for_a_slot() -> None:
    async def body() -> None:
        quotas = ConnectionQuotas(ConnectionQuotaConfig(max_connections=1))
        listener = await started(quotas, Echo(), ("EXTERNAL", "REPLICATION"), inter_broker_listener="REPLICATION")
        try:
            r1, w1 = await connect(listener)
            assert await ping(r1, w1) == b"ping\n"
            r2, w2 = await connect(listener)
            w2.write(b"ping\n")
            answer = asyncio.ensure_future(r2.readline())
            done, _ = await asyncio.wait({answer}, timeout=0.5)
            assert not done  # waiting in the backlog for a free slot
            r3, w3 = await connect(listener, "REPLICATION")  # inter-broker listener is exempt from max.connections
            assert await ping(r3, w3) == b"ping\n"
            w1.close()
            done, _ = await asyncio.wait({answer}, timeout=0.5)
            assert not done  # the inter-broker connection still counts towards max.connections (2 open > 1)
            w3.close()
            assert await asyncio.wait_for(answer, 5) == b"ping\n"  # admitted once a slot freed
            w2.close()
        finally:
            await listener.close()

    run(body)


def test_reloader_applies_store_changes_and_config_edits(tmp_path: Path) -> None:
    async def body() -> None:
        store = open_store(tmp_path / "quotas.db")
        store.alter([(QuotaEntity(ip="127.0.0.2"), {CONNECTION_CREATION_RATE: 7.0})])
        config = tmp_path / "server.properties"
        config.write_text("max.connection.creation.rate=40\nlistener.name.external.max.connection.creation.rate=9\n")
        quotas = ConnectionQuotas()
        quotas.add_listener("EXTERNAL")
        reloader = ConnectionQuotaReloader(quotas, store=store, config_path=config, interval_s=0.05)
        await reloader.start()
        try:
            assert quotas.connection_rate_for_ip("127.0.0.2") == 7
            assert quotas.broker_rate.bound == 40
            store.alter([(QuotaEntity(ip=DEFAULT), {CONNECTION_CREATION_RATE: 3.9})])
            store.alter([(QuotaEntity(ip="127.0.0.2"), {CONNECTION_CREATION_RATE: None})])
            await eventually(lambda: reloader.applied == 3)
            assert quotas.connection_rate_for_ip("127.0.0.2") == 3  # override removed, default 3.9 -> toInt 3
            assert quotas.connection_rate_for_ip("127.0.0.9") == 3
            assert quotas.listener_rate_bound("EXTERNAL") == 9
            store.alter([(QuotaEntity(ip="localhost"), {CONNECTION_CREATION_RATE: 11.0})])  # resolved, as Kafka
            store.alter([(QuotaEntity(user="alice"), {"producer_byte_rate": 1024.0})])  # not a connection quota
            store.alter([(QuotaEntity(ip="no-such-host.invalid"), {CONNECTION_CREATION_RATE: 1.0})])  # logged, skipped
            await eventually(lambda: quotas.connection_rate_for_ip("127.0.0.1") == 11)
            await asyncio.sleep(0.2)
            assert reloader.applied == 4
            config.write_text("max.connection.creation.rate=12\n# edited\n")
            await eventually(lambda: quotas.broker_rate.bound == 12)
        finally:
            await reloader.close()
            store.close()

    run(body)


def test_a_gateway_reads_its_change_log_once_per_poll_for_every_kind_of_quota(gateway_factory: Any,
                                                                               tmp_path: Path) -> None:
    """The connection quotas take the store's changes from the gateway's own poll (no second reader of the change
    log on the event loop), and the config file's connection settings are looked at in the same turn."""
    config = tmp_path / "gateway.properties"
    config.write_text("max.connection.creation.rate=40\n")
    gw = gateway_factory(config_path=config)
    gateway = gw.thread.gateway
    reloader = gateway._reloader
    assert reloader is not None and reloader._task is None  # started without a poll of its own
    assert gateway.connection_quotas.broker_rate.bound == 40
    store = open_store(gw.store_path)
    try:
        store.alter([(QuotaEntity(ip="127.0.0.2"), {CONNECTION_CREATION_RATE: 7.0})])
        store.alter([(QuotaEntity(client_id="app"), {"producer_byte_rate": 1024.0})])
        config.write_text("max.connection.creation.rate=12\n# edited\n")
        deadline = time.monotonic() + 10
        enforcement = gateway.broker_quotas.for_broker(gateway.broker)
        while not (gateway.connection_quotas.connection_rate_for_ip("127.0.0.2") == 7
                   and enforcement.managers.produce.quota_limit("u", "app") == 1024.0
                   and gateway.connection_quotas.broker_rate.bound == 12):
            assert time.monotonic() < deadline, "a change did not reach the gateway's quotas"
            time.sleep(0.05)
        applied = reloader.applied
        store.alter([(QuotaEntity(ip="127.0.0.2"), {CONNECTION_CREATION_RATE: None})])
        while gateway.connection_quotas.connection_rate_for_ip("127.0.0.2") == 7:
            assert time.monotonic() < deadline, "the removal did not reach the connection quotas"
            time.sleep(0.05)
        time.sleep(0.5)  # several more polls: each change is applied once
        assert reloader.applied == applied + 1
    finally:
        store.close()
