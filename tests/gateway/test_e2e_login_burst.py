"""Issue 37 item 1 through a real gateway: a burst of correct SASL/PLAIN logins (cold login cache, a few source IPs)
all succeed; a concurrent flood of wrong passwords costs no more hashes than the failed-login bucket allows; a login
the hash queue cannot take is closed unanswered, never told SASL_AUTHENTICATION_FAILED (error 58), which Java
clients treat as fatal."""

from __future__ import annotations

import asyncio
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.gateway.config import GatewayConfig
from quotaflow.store import open_store

from .conftest import GatewayFactory, RunningGateway

SASL_FAILED = 58
SOURCES = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")  # Linux answers on all of 127/8


def _frame(request: Any, version: int, cid: int) -> bytes:
    request.with_header(correlation_id=cid, client_id="burst")
    return bytes(request.encode(version=version, header=True, framed=True))


async def _recv(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def login(address: tuple[str, int], source: str, user: str, password: str) -> int | None:
    """SaslHandshake v1 + SaslAuthenticate v1 with PLAIN from ``source``: the error code, or None when the gateway
    closed the connection without answering."""
    reader, writer = await asyncio.open_connection(*address, local_addr=(source, 0))
    try:
        writer.write(_frame(SaslHandshakeRequest[1](mechanism="PLAIN"), 1, 1))
        assert SaslHandshakeResponse.decode(await _recv(reader), version=1, header=True).error_code == 0
        token = f"\0{user}\0{password}".encode()
        writer.write(_frame(SaslAuthenticateRequest[1](auth_bytes=token), 1, 2))
        try:
            answer = await asyncio.wait_for(_recv(reader), 120)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        return int(SaslAuthenticateResponse.decode(answer, version=1, header=True).error_code)
    finally:
        writer.close()


def _sasl_gateway(gateway_factory: GatewayFactory, tmp_path: Path, users: dict[str, str], iterations: int,
                  **props: str) -> RunningGateway:
    store = tmp_path / "logins.db"
    with open_store(store) as qs:
        for user, password in users.items():
            qs.put_credential(hash_password(user, password, iterations=iterations))
    config = GatewayConfig.from_properties({"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT",
                                            **props})
    return gateway_factory(config=config, store=store, listeners={"SASL_PLAINTEXT": "127.0.0.1:0"})


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


@pytest.mark.slow
def test_a_burst_of_correct_logins_all_succeed(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """200 correct logins at once (20 users x 10 connections, 4 source IPs, cold cache): every one accepted. The
    old gateway refused all but a handful as wrong passwords (4 hashes in flight, a bucket of 3 per IP charged
    before every hash)."""
    users = {f"svc-{i}": f"secret-{i}" for i in range(20)}
    gw = _sasl_gateway(gateway_factory, tmp_path, users, iterations=10_000)

    async def burst() -> list[int | None]:
        return await asyncio.gather(*(login(gw.address, SOURCES[n % 4], f"svc-{n % 20}", f"secret-{n % 20}")
                                      for n in range(200)))

    codes = _run(asyncio.wait_for(burst(), 300))
    assert codes == [0] * 200
    sasl = gw.thread.gateway.sasl
    assert sasl.refused == 0 and sasl.busy == 0
    assert sasl.hashed <= 20 * 4  # one hash per user and source IP at most: the rest waited for it or hit the cache


@pytest.mark.slow
def test_a_concurrent_wrong_password_flood_costs_bounded_hashes(gateway_factory: GatewayFactory,
                                                                 tmp_path: Path) -> None:
    """150 wrong passwords at once from one IP: every one answered error 58, and no more hashed than the IP's
    bucket holds (burst 3, 1 per second); alice's right password from another IP still gets in."""
    gw = _sasl_gateway(gateway_factory, tmp_path, {"alice": "alice-secret"}, iterations=1000)

    async def flood() -> list[int | None]:
        return await asyncio.gather(*(login(gw.address, "127.0.0.9", "alice", f"guess-{n}") for n in range(150)))

    started = time.monotonic()
    codes = _run(asyncio.wait_for(flood(), 300))
    elapsed = time.monotonic() - started
    assert codes == [SASL_FAILED] * 150
    sasl = gw.thread.gateway.sasl
    assert sasl.hashed_failed <= 3 + elapsed + 1, (sasl.hashed_failed, elapsed)
    assert sasl.refused >= 150 - sasl.hashed_failed
    assert _run(login(gw.address, "127.0.0.1", "alice", "alice-secret")) == 0


@pytest.mark.slow
def test_a_full_hash_queue_closes_the_connection_instead_of_error_58(gateway_factory: GatewayFactory,
                                                                      tmp_path: Path) -> None:
    """One hash thread, a queue of 2, 12 distinct correct logins at once with a slow hash: those the thread and the
    queue hold are checked and accepted, the others are closed unanswered (the client reconnects); none is answered
    error 58."""
    users = {f"u{i}": "pw" for i in range(12)}
    gw = _sasl_gateway(gateway_factory, tmp_path, users, iterations=300_000,
                       **{"quotaflow.sasl.verify.queue.size": "2"})

    async def burst() -> list[int | None]:
        return await asyncio.gather(*(login(gw.address, "127.0.0.1", f"u{i}", "pw") for i in range(12)))

    codes = _run(asyncio.wait_for(burst(), 300))
    assert SASL_FAILED not in codes
    # one hashing and two queued when the rest arrive (a login arriving after a hash ended may take its place)
    assert codes.count(0) >= 3 and codes.count(None) >= 1 and codes.count(0) + codes.count(None) == 12, codes
    assert gw.thread.gateway.sasl.busy == codes.count(None)
    assert _run(login(gw.address, "127.0.0.1", "u11", "pw")) == 0  # reconnecting, it gets in


@pytest.mark.slow
def test_librdkafka_clients_logging_in_at_once_all_get_in(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """40 librdkafka clients (confluent-kafka) of 8 services bootstrap at once with the right passwords, as after a
    gateway restart: each gets its metadata, none sees an authentication failure."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    users = {f"svc-{i}": f"secret-{i}" for i in range(8)}
    gw = _sasl_gateway(gateway_factory, tmp_path, users, iterations=20_000)
    errors: list[str] = []
    clients = [AdminClient({"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                            "sasl.mechanism": "PLAIN", "sasl.username": f"svc-{n % 8}",
                            "sasl.password": f"secret-{n % 8}", "error_cb": lambda e: errors.append(str(e))})
               for n in range(40)]
    for client in clients:
        try:
            assert client.list_topics(timeout=60).brokers
        except KafkaException as e:
            errors.append(str(e))
    assert not [e for e in errors if "uthentication" in e], errors
    assert gw.thread.gateway.sasl.refused == 0
