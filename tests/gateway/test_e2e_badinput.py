"""Bad input at the gateway, with the real upstream behind it: fuzzed frames, oversized frames, idle connections and
an upstream restart. Throughout, the gateway keeps serving its other clients."""

from __future__ import annotations

import os
import signal
import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.admin import DescribeClientQuotasRequest
from kafka.protocol.metadata import MetadataRequest

from quotaflow.admin import Alteration
from quotaflow.admin.wire import WireAdmin
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.filters import QuotaFilter
from quotaflow.gateway.config import GatewayConfig
from quotaflow.testing.tansu import Tansu, api_versions_probe

from .conftest import GatewayFactory, RunningGateway
from .gateway_wire import Wire

pytestmark = pytest.mark.broker


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """True when the peer closes the socket within ``seconds`` (bytes it sends first are read and dropped)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
        except ConnectionError:
            return True
    return False


def still_serving(gw: RunningGateway, witness: WireAdmin) -> None:
    """An old connection and a new one both get answers."""
    assert len(witness.describe(QuotaFilter())) == 1
    host, port = gw.address
    assert api_versions_probe(host, port, timeout=5)


def header(api_key: int, api_version: int, correlation_id: int, client_id: bytes) -> bytes:
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id


frames = st.one_of(
    st.binary(min_size=0, max_size=300),  # anything at all
    st.builds(  # a plausible header in front of garbage: reaches the per-API decoders
        lambda k, v, c, cid, body: header(k, v, c, cid) + body,
        st.integers(-1, 80),
        st.integers(-1, 20),
        st.integers(-(2**31), 2**31 - 1),
        st.binary(max_size=20),
        st.binary(max_size=200),
    ),
    st.builds(  # the quota admin APIs the gateway answers itself, with broken bodies
        lambda k, v, body: header(k, v, 7, b"fuzz") + body,
        st.sampled_from([48, 49, 17, 36, 18]),
        st.integers(0, 4),
        st.binary(max_size=120),
    ),
)


@pytest.fixture
def fuzz_target(gateway: RunningGateway) -> tuple[RunningGateway, WireAdmin]:
    witness = WireAdmin(gateway.bootstrap)
    assert witness.alter([Alteration.of(QuotaEntity(user="witness"), {"producer_byte_rate": 1e6})])[0].ok
    return gateway, witness


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=frames, lie=st.sampled_from([0, 0, 0, 5, -3]))
def test_fuzzed_frames_never_take_the_gateway_down(
    fuzz_target: tuple[RunningGateway, WireAdmin], payload: bytes, lie: int
) -> None:
    gw, witness = fuzz_target
    size = max(0, len(payload) + lie)  # sometimes the size prefix lies: the frame is cut short or runs on
    with socket.create_connection(gw.address, timeout=2) as sock:
        sock.sendall(struct.pack(">i", size) + payload)
        closed_within(sock, 0.15)
    still_serving(gw, witness)


def test_frames_over_socket_request_max_bytes_are_closed(gateway_factory: GatewayFactory) -> None:
    for limit in (GatewayConfig().socket_request_max_bytes, 1 << 20):  # Kafka's 100 MiB default, and 1 MiB
        gw = gateway_factory(config=GatewayConfig(socket_request_max_bytes=limit))
        with socket.create_connection(gw.address, timeout=5) as big, socket.create_connection(gw.address) as ok:
            big.sendall(struct.pack(">i", limit + 1) + header(18, 0, 1, b"big"))
            assert closed_within(big, 5), f"a {limit + 1}-byte frame was not refused"
            # a frame of exactly the limit is not refused up front: the gateway waits for its bytes
            ok.sendall(struct.pack(">i", limit) + header(18, 0, 1, b"ok"))
            assert not closed_within(ok, 0.3)
        assert api_versions_probe(*gw.address, timeout=5)


def test_idle_connections_are_closed_after_connections_max_idle_ms(gateway_factory: GatewayFactory) -> None:
    # 1.5 s idle against a request every 200 ms: a loaded machine may stall the busy client for a second without
    # making it idle
    gw = gateway_factory(config=GatewayConfig(connections_max_idle_ms=1500))
    host, port = gw.address
    idle = socket.create_connection((host, port), timeout=5)
    busy = WireAdmin(gw.bootstrap)
    try:
        for _ in range(15):  # 3 s of traffic, a request every 200 ms: never idle for 1.5 s
            busy.describe(QuotaFilter())
            time.sleep(0.2)
        assert closed_within(idle, 5), "an idle connection survived connections.max.idle.ms"
        busy.describe(QuotaFilter())  # the busy connection is still open
    finally:
        idle.close()
        busy.close()


def test_broker_outage_holds_clients_and_recovers_without_restart(gateway_factory: GatewayFactory) -> None:
    """kill -9 the upstream under a live producer: the gateway holds the producer's reconnect (no accept-and-drop
    loop: a handful of accepts, one rate-limited warning line), and when tansu is back on the same port everything
    sent since the kill is delivered and acked by the new broker, without a gateway restart.

    tansu's memory storage forgets what was written before the kill; every record acked after it is checked."""
    with Tansu() as upstream:
        gw = gateway_factory(upstream=upstream.bootstrap, config=GatewayConfig(upstream_connect_timeout_ms=30_000))
        gateway = gw.thread.gateway
        stats = gateway._listener.stats["PLAINTEXT"]
        producer = KafkaProducer(bootstrap_servers=gw.bootstrap, acks=1, retries=50, retry_backoff_ms=200,
                                 request_timeout_ms=30_000, enable_idempotence=False, linger_ms=5)
        try:
            before = [producer.send("outage", b"before-%d" % i) for i in range(10)]
            producer.flush(30)
            assert all(f.succeeded() for f in before)
            accepted, lines = stats.accepted, gateway.upstream_warnings.lines
            assert upstream.pid is not None
            os.kill(upstream.pid, signal.SIGKILL)
            during = [producer.send("outage", b"during-%d" % i) for i in range(20)]
            time.sleep(4.0)  # the outage
            reconnects = stats.accepted - accepted
            warned = gateway.upstream_warnings.lines - lines
            upstream.restart()  # same port
            producer.flush(60)
            after = [producer.send("outage", b"after-%d" % i) for i in range(20)]
            producer.flush(60)
            failed = [f.exception for f in during + after if not f.succeeded()]
            assert failed == [], failed
            print(f"outage of 4 s: {reconnects} connections accepted, {warned} warning line(s)")
            assert reconnects <= 10, f"{reconnects} connections accepted during a 4 s outage"
            assert warned <= 1
            consumer = KafkaConsumer("outage", bootstrap_servers=upstream.bootstrap, auto_offset_reset="earliest",
                                     consumer_timeout_ms=5000)
            seen = {m.value for m in consumer}
            consumer.close()
            acked = {b"during-%d" % i for i in range(20)} | {b"after-%d" % i for i in range(20)}
            assert acked <= seen, sorted(acked - seen)[:5]
            witness = WireAdmin(gw.bootstrap)
            try:
                assert len(witness.describe(QuotaFilter())) == 0
            finally:
                witness.close()
        finally:
            producer.close(5)


def test_a_client_is_held_while_the_upstream_is_down_then_closed(gateway_factory: GatewayFactory) -> None:
    """No upstream at all: the client's first forwarded request is held for quotaflow.upstream.connect.timeout.ms
    (retried with backoff, one warning line), then its connection is closed; nothing is accepted meanwhile."""
    with socket.socket() as placeholder:  # a loopback port nobody listens on
        placeholder.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{placeholder.getsockname()[1]}"
    gw = gateway_factory(upstream=dead, config=GatewayConfig(upstream_connect_timeout_ms=1500,
                                                             upstream_backoff_ms=50, upstream_backoff_max_ms=200))
    gateway = gw.thread.gateway
    stats = gateway._listener.stats["PLAINTEXT"]
    lines = gateway.upstream_warnings.lines
    wire = Wire(gw.address)
    started = time.monotonic()
    wire.send(MetadataRequest[4](topics=None, allow_auto_topic_creation=False), 4)
    assert wire.closed(timeout=10)
    held = time.monotonic() - started
    assert 1.3 <= held <= 5.0, held
    assert stats.accepted == 1
    assert gateway.upstream_warnings.lines - lines <= 1


def test_responses_made_here_never_block_a_forwarded_one(gateway_factory: GatewayFactory) -> None:
    """With a 1-byte unsent bound every response is over it: local answers (DescribeClientQuotas) queued behind a
    forwarded Metadata must not stop the Metadata response from being read, and all come back in order."""
    gw = gateway_factory(config=GatewayConfig(max_unsent_response_bytes=1))
    wire = Wire(gw.address)
    c = DescribeClientQuotasRequest.ComponentData
    frames = []
    for kind in "MMLLLMMLLLMM":  # a local answer queued behind a forwarded request that is not read yet
        wire.cid += 1
        if kind == "M":
            request: object = MetadataRequest[4](topics=None, allow_auto_topic_creation=False)
            version = 4
        else:
            request = DescribeClientQuotasRequest[1](components=[c(entity_type="user", match_type=2, match=None)],
                                                     strict=False)
            version = 1
        request.with_header(correlation_id=wire.cid, client_id="pipeliner")  # type: ignore[attr-defined]
        frames.append(bytes(request.encode(version=version, header=True, framed=True)))  # type: ignore[attr-defined]
    wire.sock.sendall(b"".join(frames))
    wire.sock.settimeout(10)
    got = [struct.unpack_from(">i", wire.recv())[0] for _ in range(12)]
    assert got == list(range(1, 13))
