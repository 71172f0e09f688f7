"""The request memory pool no client can hold (issue 22 item 2), with real sockets against a gateway in front of tansu.

Memory is reserved as a frame's body arrives, not from the size it announces; frames before SASL authentication
draw on a pool of their own; small requests need no pool memory at all; a frame begun must be finished within
``quotaflow.request.body.timeout.ms``."""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest
from kafka import KafkaProducer
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.gateway.config import GatewayConfig
from quotaflow.store import open_store

from .conftest import GatewayFactory, RunningGateway
from .gateway_wire import Wire

pytestmark = pytest.mark.broker

MiB = 1 << 20


def api_versions_answered(gw: RunningGateway) -> bool:
    """A fresh client's ApiVersions is answered (within the socket's 10 s timeout)."""
    wire = Wire(gw.address)
    try:
        wire.send(ApiVersionsRequest[3](client_software_name="t", client_software_version="1"), 3)
        return ApiVersionsResponse.decode(wire.recv(), version=3, header=True).error_code == 0
    except TimeoutError:
        return False
    finally:
        wire.sock.close()


@contextmanager
def partial_frames(gw: RunningGateway, count: int, announce: int, send: int) -> Iterator[list[socket.socket]]:
    """``count`` sockets that announce an ``announce``-byte frame and send up to ``send`` bytes of it (what the
    gateway takes within a few seconds), then stall; closed on exit."""
    socks = []
    try:
        for _ in range(count):
            s = socket.create_connection(gw.address, timeout=5)
            s.sendall(struct.pack(">i", announce))
            s.setblocking(False)
            socks.append(s)
        chunk = b"x" * 65536
        sent = [0] * count
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(n < send for n in sent):
            for i, s in enumerate(socks):
                if sent[i] < send:
                    with suppress(BlockingIOError, ConnectionError):
                        sent[i] += s.send(chunk[:send - sent[i]])
            time.sleep(0.001)
        yield socks
    finally:
        for s in socks:
            s.close()


def pool_used(gw: RunningGateway) -> tuple[int, int]:
    gateway = gw.thread.gateway
    return gw.thread.call(lambda: (gateway.request_memory.used, gateway.preauth_memory.used))  # type: ignore[no-any-return]


def test_one_announced_frame_does_not_block_other_clients(gateway_factory: GatewayFactory) -> None:
    """Issue 22's case: ``queued.max.request.bytes=104857600`` and one connection announcing 100 MiB and sending 16
    bytes. Before: the announced size was reserved, every other client's ApiVersions waited for the idle close."""
    gw = gateway_factory(config=GatewayConfig.from_properties({"queued.max.request.bytes": str(100 * MiB)}))
    with partial_frames(gw, 1, 100 * MiB, 16):
        assert api_versions_answered(gw)
        used, _ = pool_used(gw)
        assert used <= 64 * 1024, used  # what arrived (one first chunk), not what was announced
        # a large request still goes through: the pool is not held by the announcement
        producer = KafkaProducer(bootstrap_servers=gw.bootstrap, acks=1, max_request_size=2 * MiB,
                                 request_timeout_ms=10_000)
        try:
            producer.send(f"mem-{uuid.uuid4().hex[:8]}", b"v" * (1 * MiB)).get(timeout=30)
        finally:
            producer.close(5)


def test_unauthenticated_frames_have_their_own_small_pool(gateway_factory: GatewayFactory, tmp_path: object) -> None:
    """Issue 22's second case: 201 unauthenticated sockets announcing 524,288-byte frames (Kafka's
    ``sasl.server.max.receive.size``), here sending 64 KiB of them each. Before, they held the whole shared pool."""
    config = GatewayConfig.from_properties({"queued.max.request.bytes": str(100 * MiB),
                                            "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT"})
    gw = gateway_factory(config=config)
    with open_store(gw.store_path) as store:
        store.put_credential(hash_password("alice", "alice-secret"))
    with partial_frames(gw, 201, 524_288, 64 * 1024):
        assert api_versions_answered(gw)
        used, preauth = pool_used(gw)
        assert used == 0  # outside the shared pool, as Kafka's SASL authenticator reads outside it
        assert 0 < preauth <= config.sasl_queued_max_request_bytes + 524_288, preauth
        producer = KafkaProducer(bootstrap_servers=gw.bootstrap, acks=1, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="PLAIN", sasl_plain_username="alice",
                                 sasl_plain_password="alice-secret", max_request_size=2 * MiB,
                                 request_timeout_ms=10_000)
        try:
            producer.send(f"mem-{uuid.uuid4().hex[:8]}", b"v" * (1 * MiB)).get(timeout=30)
        finally:
            producer.close(5)


def test_the_pool_holds_what_arrived_and_is_released_on_close(gateway_factory: GatewayFactory) -> None:
    """Twelve connections each send 2 MiB of a 4 MiB frame into a 4 MiB pool: the pool holds at most its capacity
    plus the oldest frame (which may always go on), small requests still flow, and everything is freed once they
    are gone (a connection waiting for memory is not read, so its close is noticed by the body deadline)."""
    gw = gateway_factory(config=GatewayConfig.from_properties({"socket.request.max.bytes": str(4 * MiB),
                                                               "queued.max.request.bytes": str(4 * MiB),
                                                               "quotaflow.request.body.timeout.ms": "8000"}))
    with partial_frames(gw, 12, 4 * MiB, 2 * MiB):
        used, _ = pool_used(gw)
        assert 2 * MiB <= used <= 8 * MiB, used
        assert api_versions_answered(gw)
    deadline = time.monotonic() + 30
    while pool_used(gw) != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool_used(gw) == (0, 0)


def test_a_frame_not_finished_in_time_closes_the_connection(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(config=GatewayConfig.from_properties({"quotaflow.request.body.timeout.ms": "300"}))
    stalled = Wire(gw.address)
    stalled.sock.sendall(struct.pack(">i", 100) + b"\x00" * 10)
    idle = Wire(gw.address)  # no frame begun: only connections.max.idle.ms applies
    assert stalled.closed(timeout=15)
    assert not idle.closed(timeout=0.5)
    assert api_versions_answered(gw)


def test_half_sent_frames_cannot_keep_the_pool_from_a_client_that_sends(gateway_factory: GatewayFactory) -> None:
    """Twelve connections hold a 4 MiB pool with half-sent frames and stall; a producer's 1.5 MiB record waits for
    memory. While it waits, holders whose frame has received nothing for 2 s are closed, so it goes through long
    before the (here 60 s) body timeout would have freed the pool."""
    gw = gateway_factory(config=GatewayConfig.from_properties({"socket.request.max.bytes": str(4 * MiB),
                                                               "queued.max.request.bytes": str(4 * MiB),
                                                               "quotaflow.request.body.timeout.ms": "60000"}))
    with partial_frames(gw, 12, 4 * MiB, 2 * MiB):
        started = time.monotonic()
        producer = KafkaProducer(bootstrap_servers=gw.bootstrap, acks=1, max_request_size=4 * MiB,
                                 request_timeout_ms=50_000)
        try:
            producer.send(f"mem-{uuid.uuid4().hex[:8]}", b"v" * (3 * MiB // 2)).get(timeout=55)
        finally:
            producer.close(5)
        took = time.monotonic() - started
    assert took < 40, took
