"""Bad input at the gateway, with the real upstream behind it: fuzzed frames, oversized frames, idle connections and
an upstream restart. Throughout, the gateway keeps serving its other clients."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaProducer

from quotaflow.admin import Alteration
from quotaflow.admin.wire import WireAdmin
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.filters import QuotaFilter
from quotaflow.gateway.config import GatewayConfig
from quotaflow.testing.tansu import Tansu, api_versions_probe

from .conftest import GatewayFactory, RunningGateway

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
    gw = gateway_factory(config=GatewayConfig(connections_max_idle_ms=600))
    host, port = gw.address
    idle = socket.create_connection((host, port), timeout=5)
    busy = WireAdmin(gw.bootstrap)
    try:
        for _ in range(10):  # 2 s of traffic, a request every 200 ms: never idle for 600 ms
            busy.describe(QuotaFilter())
            time.sleep(0.2)
        assert closed_within(idle, 3), "an idle connection survived connections.max.idle.ms"
        busy.describe(QuotaFilter())  # the busy connection is still open
    finally:
        idle.close()
        busy.close()


def test_upstream_restart_is_survived(gateway_factory: GatewayFactory) -> None:
    """Each client connection has its own upstream connection, so an upstream outage closes the clients' connections
    and refuses new ones promptly (never a hang); once the upstream is back, the same gateway serves again and a
    producer that lived through the outage delivers."""
    with Tansu() as upstream:
        gw = gateway_factory(upstream=upstream.bootstrap)
        setup = WireAdmin(gw.bootstrap)
        assert setup.alter([Alteration.of(QuotaEntity(user="witness"), {"producer_byte_rate": 1e6})])[0].ok
        producer = KafkaProducer(
            bootstrap_servers=gw.bootstrap,
            retries=50,
            retry_backoff_ms=200,
            request_timeout_ms=10_000,
            acks=1,  # not idempotent: the restarted in-memory tansu has forgotten every producer id
            enable_idempotence=False,
        )
        try:
            before = [producer.send("restart", b"before-%d" % i) for i in range(10)]
            producer.flush(30)
            assert all(f.succeeded() for f in before)
            upstream.stop()
            with socket.create_connection(gw.address, timeout=5) as during:
                assert closed_within(during, 5), "a connection during the outage was neither served nor closed"
            upstream.restart()
            after = [producer.send("restart", b"after-%d" % i) for i in range(10)]
            producer.flush(60)
            assert all(f.succeeded() for f in after), [f.exception for f in after if f.failed()]
            witness = WireAdmin(gw.bootstrap)
            try:
                still_serving(gw, witness)
            finally:
                witness.close()
        finally:
            producer.close(5)
            setup.close()
