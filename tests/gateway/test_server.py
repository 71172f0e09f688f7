"""The gateway in front of a real tansu (loopback): forwarding, local answers, framing limits, idle close."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse

from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.data import versions
from quotaflow.gateway.server import GatewayThread
from quotaflow.testing.tansu import Tansu

try:  # tests/gateway is a package when its __init__.py is present, else a rootdir on sys.path
    from .gateway_wire import Wire
except ImportError:
    from gateway_wire import Wire  # type: ignore[no-redef]

pytestmark = pytest.mark.broker


@pytest.fixture
def gateway(tansu: Tansu, tmp_path: Path) -> Iterator[GatewayThread]:
    config = GatewayConfig(socket_request_max_bytes=1 << 20, connections_max_idle_ms=1500)
    with GatewayThread(tansu.bootstrap, {"PLAINTEXT": "127.0.0.1:0"}, tmp_path / "q.db", config=config) as gw:
        yield gw


def test_produce_and_consume_through_gateway(gateway: GatewayThread) -> None:
    topic = f"gw-{time.time_ns()}"
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap(), acks="all", linger_ms=5)
    for i in range(200):
        producer.send(topic, f"m{i}".encode())
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(
        topic, bootstrap_servers=gateway.bootstrap(), auto_offset_reset="earliest", consumer_timeout_ms=5000
    )
    values = sorted(int(m.value[1:]) for m in consumer)
    consumer.close()
    assert values == list(range(200))


def test_api_versions_and_metadata_show_only_the_gateway(gateway: GatewayThread, tansu: Tansu) -> None:
    wire = Wire(gateway.address())
    wire.send(ApiVersionsRequest[3](client_software_name="t", client_software_version="1"), 3)
    av = ApiVersionsResponse.decode(wire.recv(), version=3, header=True)
    keys = {a.api_key: (a.min_version, a.max_version) for a in av.api_keys}
    assert av.header.correlation_id == 1 and av.error_code == 0
    assert keys[ApiKey.DescribeClientQuotas] == (0, 1) and keys[ApiKey.AlterClientQuotas] == (0, 1)
    wire.send(MetadataRequest[12](topics=None, allow_auto_topic_creation=False), 12)
    md = MetadataResponse.decode(wire.recv(), version=12, header=True)
    assert md.header.correlation_id == 2
    assert {(b.host, b.port) for b in md.brokers} == {gateway.address()}


def test_kip511_newer_api_versions(gateway: GatewayThread) -> None:
    wire = Wire(gateway.address())
    header = struct.pack(">hhih", ApiKey.ApiVersions, 99, 5, 1) + b"x" + b"\x00" + b"\x01\x00\x01\x00\x00"
    wire.sock.sendall(struct.pack(">i", len(header)) + header)
    av = ApiVersionsResponse.decode(wire.recv(), version=0, header=True)
    assert av.error_code == 35 and av.header.correlation_id == 5
    assert [a.api_key for a in av.api_keys] == [ApiKey.ApiVersions]


def test_oversized_frame_closes_only_that_connection(gateway: GatewayThread) -> None:
    bad, good = Wire(gateway.address()), Wire(gateway.address())
    bad.sock.sendall(struct.pack(">i", (1 << 20) + 1))
    assert bad.closed()
    good.send(ApiVersionsRequest[0](), 0)
    assert ApiVersionsResponse.decode(good.recv(), version=0, header=True).error_code == 0


def test_malformed_frame_closes_only_that_connection(gateway: GatewayThread) -> None:
    bad, good = Wire(gateway.address()), Wire(gateway.address())
    frame = struct.pack(">hhih", ApiKey.DescribeClientQuotas, 1, 1, 2) + b"ab" + b"\x00\xff\xff"
    bad.sock.sendall(struct.pack(">i", len(frame)) + frame)
    assert bad.closed()
    good.send(ApiVersionsRequest[0](), 0)
    assert ApiVersionsResponse.decode(good.recv(), version=0, header=True).error_code == 0


def test_idle_connection_closed(gateway: GatewayThread) -> None:
    wire = Wire(gateway.address())
    wire.send(ApiVersionsRequest[0](), 0)
    wire.recv()
    start = time.monotonic()
    assert wire.closed(timeout=10)
    assert 1.3 <= time.monotonic() - start <= 5


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([17, 36, 48, 49]), st.integers(-2, 5), st.binary(max_size=40))
def test_fuzzed_local_requests_never_hurt_other_connections(gateway: GatewayThread, api_key: int, version: int,
                                                           body: bytes) -> None:
    # only APIs the gateway answers itself are fuzzed: the shared upstream never sees garbage
    fuzz = Wire(gateway.address())
    frame = struct.pack(">hhih", api_key, version, 9, 1) + b"f" + body
    fuzz.sock.sendall(struct.pack(">i", len(frame)) + frame)
    fuzz.sock.settimeout(5)
    with contextlib.suppress(OSError):
        fuzz.sock.recv(65536)  # an answer, or the connection closed: both are fine
    fuzz.sock.close()
    good = Wire(gateway.address())
    good.send(ApiVersionsRequest[0](), 0)
    assert ApiVersionsResponse.decode(good.recv(), version=0, header=True).error_code == 0
    good.sock.close()


def _reply_or_close(address: tuple[str, int], api_key: int, version: int) -> tuple[str, bytes]:
    """Send a bare header; ("response", frame) for one whole framed reply, ("closed", b"") for a clean close."""
    with socket.create_connection(address, timeout=5) as s:
        header = struct.pack(">hhih", api_key, version, 7, 1) + b"x"
        s.sendall(struct.pack(">i", len(header)) + header)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                assert data == b"", f"partial frame {data.hex()} before the close"
                return "closed", b""
            data += chunk
            if len(data) >= 4 and len(data) - 4 >= struct.unpack(">i", data[:4])[0]:
                size = struct.unpack(">i", data[:4])[0]
                assert size >= 4 and len(data) == 4 + size, f"malformed reply {data[:16].hex()}"
                return "response", data[4:]


@pytest.mark.parametrize("api_key", [0, 1, 3, 9, 10, 18, 19, 32, 48, 60, 75, 999])
@pytest.mark.parametrize("version", [-1, 99, -32768])
def test_bad_header_versions_get_a_whole_response_or_a_clean_close(gateway: GatewayThread, api_key: int,
                                                                   version: int) -> None:
    kind, frame = _reply_or_close(gateway.address(), api_key, version)
    if api_key == ApiKey.ApiVersions:  # KIP-511: UNSUPPORTED_VERSION in a v0 body, same correlation id
        assert kind == "response"
        av = ApiVersionsResponse.decode(frame, version=0, header=True)
        assert av.error_code == 35 and av.header.correlation_id == 7
    else:
        assert kind == "closed"
    good = Wire(gateway.address())  # the gateway still serves
    good.send(ApiVersionsRequest[0](), 0)
    assert ApiVersionsResponse.decode(good.recv(), version=0, header=True).error_code == 0


def _raw_request(api_key: int, version: int, cid: int, body: bytes) -> bytes:
    """A flexible request (header v2) for an API kafka-python does not model."""
    frame = struct.pack(">hhih", api_key, version, cid, 3) + b"raw" + b"\x00" + body
    return struct.pack(">i", len(frame)) + frame


def test_every_upstream_api_the_gateway_can_read_is_offered_and_no_other_is_taken(gateway: GatewayThread,
                                                                                   tansu: Tansu) -> None:
    direct = Wire((tansu.host, tansu.port))
    direct.send(ApiVersionsRequest[3](client_software_name="t", client_software_version="1"), 3)
    upstream = {a.api_key: (a.min_version, a.max_version)
                for a in ApiVersionsResponse.decode(direct.recv(), version=3, header=True).api_keys}
    wire = Wire(gateway.address())
    wire.send(ApiVersionsRequest[3](client_software_name="t", client_software_version="1"), 3)
    offered = {a.api_key: (a.min_version, a.max_version)
               for a in ApiVersionsResponse.decode(wire.recv(), version=3, header=True).api_keys}
    # every upstream API the gateway can authorize and read (without an authorizer: hide its own topics in), plus
    # its own
    own = {ApiKey.DescribeClientQuotas, ApiKey.AlterClientQuotas, ApiKey.DescribeAcls, ApiKey.CreateAcls,
           ApiKey.DeleteAcls, ApiKey.DescribeUserScramCredentials, ApiKey.AlterUserScramCredentials}
    assert set(offered) == {k for k in upstream if versions.offered(k) is not None} | own
    assert offered[ApiKey.CreateAcls] == (1, 3)
    assert offered[ApiKey.Produce][1] == min(upstream[ApiKey.Produce][1], 9)
    # tansu's ConsumerGroupDescribe (69) and GetTelemetrySubscriptions (71): kafka-python 3.0.12 has no message
    # definition for either, so the gateway cannot read them: not offered, and the connection is closed if sent
    assert {ApiKey.ConsumerGroupDescribe, ApiKey.GetTelemetrySubscriptions} <= set(upstream)
    assert not {ApiKey.ConsumerGroupDescribe, ApiKey.GetTelemetrySubscriptions} & set(offered)
    wire.sock.sendall(_raw_request(ApiKey.GetTelemetrySubscriptions, 0, 42, bytes(16) + b"\x00"))
    assert wire.closed()
