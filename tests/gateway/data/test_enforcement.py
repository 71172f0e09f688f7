"""Quota enforcement through the gateway against a real tansu: KIP-219 throttle fields, muting, live updates."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import QuotaEntity
from quotaflow.events import read_dataset
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.server import GatewayThread
from quotaflow.store import open_store
from quotaflow.testing.tansu import Tansu

try:  # tests/gateway is a package when its __init__.py is present, else a rootdir on sys.path
    from ..gateway_wire import Wire
except ImportError:
    from gateway_wire import Wire  # type: ignore[no-redef]

pytestmark = pytest.mark.broker

RATE = 20_000  # producer_byte_rate for client-id "slow"
VALUE = b"v" * 10_000


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "q.db"


@pytest.fixture
def gateway(tansu: Tansu, store_path: Path) -> Iterator[GatewayThread]:
    # two 1 s samples: the rate window is short, so a test sees throttling within a couple of seconds
    config = GatewayConfig(quota_window_num=2, quota_window_size_seconds=1, store_poll_ms=100)
    with GatewayThread(tansu.bootstrap, {"PLAINTEXT": "127.0.0.1:0"}, store_path, config=config) as gw:
        yield gw


def _set(store_path: Path, client_id: str, key: str, value: float | None) -> None:
    with open_store(store_path) as store:
        results = Admin(store).alter([Alteration.of(QuotaEntity(client_id=client_id), {key: value})])
        assert all(r.ok for r in results)


def _produce(wire: Wire, topic: str, client_id: str) -> tuple[ProduceResponse, float]:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=None, key=None, value=VALUE, headers=[])
    builder.close()
    t = ProduceRequest.TopicProduceData
    request = ProduceRequest[9](
        transactional_id=None,
        acks=1,
        timeout_ms=5000,
        topic_data=[t(name=topic, partition_data=[t.PartitionProduceData(index=0, records=bytes(builder.buffer()))])],
    )
    wire.cid += 1
    request.with_header(correlation_id=wire.cid, client_id=client_id)
    sent = time.monotonic()
    wire.sock.sendall(bytes(request.encode(header=True, framed=True)))
    response = ProduceResponse.decode(wire.recv(), version=9, header=True)
    return response, time.monotonic() - sent


def test_produce_throttle_time_and_mute(gateway: GatewayThread, store_path: Path) -> None:
    _set(store_path, "slow", "producer_byte_rate", RATE)
    time.sleep(0.5)  # the gateway polls the store every 100 ms
    topic = f"thr-{time.time_ns()}"
    wire = Wire(gateway.address())
    throttles = []
    for _ in range(4):
        response, _ = _produce(wire, topic, "slow")
        assert response.responses[0].partition_responses[0].error_code in (0, 3)  # 3: topic being auto-created
        throttles.append(response.throttle_time_ms)
    assert max(throttles) > 0, throttles
    # the connection is muted after a throttled response: the next request waits for the throttle to pass
    last = throttles[-1]
    if last > 0:
        _, elapsed = _produce(wire, topic, "slow")
        assert elapsed * 1000 >= last * 0.8
    # an unthrottled client-id on another connection is unaffected
    other = Wire(gateway.address())
    fast = [_produce(other, topic, "fast")[0].throttle_time_ms for _ in range(4)]
    assert fast == [0, 0, 0, 0]


def test_quota_removal_applies_without_restart(gateway: GatewayThread, store_path: Path) -> None:
    _set(store_path, "gone", "producer_byte_rate", 1000)
    time.sleep(0.5)
    topic = f"rm-{time.time_ns()}"
    wire = Wire(gateway.address())
    assert _produce(wire, topic, "gone")[0].throttle_time_ms > 0
    _set(store_path, "gone", "producer_byte_rate", None)
    time.sleep(0.6)
    fresh = Wire(gateway.address())
    assert [_produce(fresh, topic, "gone")[0].throttle_time_ms for _ in range(3)] == [0, 0, 0]


@pytest.fixture
def logged_gateway(tansu: Tansu, store_path: Path, tmp_path: Path) -> Iterator[GatewayThread]:
    config = GatewayConfig(quota_window_num=2, quota_window_size_seconds=1, store_poll_ms=100)
    with GatewayThread(tansu.bootstrap, {"PLAINTEXT": "127.0.0.1:0"}, store_path, config=config,
                       event_log=tmp_path / "events") as gw:
        yield gw


def test_throttled_fetch_is_empty_and_nothing_is_lost(logged_gateway: GatewayThread, store_path: Path,
                                                      tmp_path: Path) -> None:
    gw = logged_gateway
    topic = f"fetch-{time.time_ns()}"
    producer = KafkaProducer(bootstrap_servers=gw.bootstrap(), acks=1, client_id="writer")
    for i in range(60):
        producer.send(topic, VALUE + str(i).encode())
    producer.flush()
    producer.close()
    _set(store_path, "reader", "consumer_byte_rate", 100_000)
    time.sleep(0.5)
    consumer = KafkaConsumer(topic, bootstrap_servers=gw.bootstrap(), client_id="reader",
                             auto_offset_reset="earliest")
    seen: list[int] = []
    deadline = time.monotonic() + 30
    while len(seen) < 60 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            seen.extend(int(m.value[len(VALUE):]) for m in records)
    consumer.close()
    seen.sort()
    assert seen == list(range(60))  # throttled fetches were answered empty, and everything arrived anyway
    gw.stop()
    table = read_dataset(tmp_path / "events", "requests")
    assert table is not None
    rows = table.to_pylist()
    fetches = [r for r in rows if r["api_key"] == 1 and r["client_id"] == "reader"]
    throttled = [r for r in fetches if r["throttle_ms_fetch"] > 0]
    assert throttled, "a 600 kB read at 100 kB/s must be throttled"
    assert all(r["throttle_ms"] >= r["throttle_ms_fetch"] for r in throttled)
    assert all(r["user"] == "ANONYMOUS" and r["io_thread_ns"] > 0 for r in fetches)
    produces = [r for r in rows if r["api_key"] == 0]
    assert produces and all(r["acks"] == 1 and r["request_bytes"] > 10_000 for r in produces)
    connections = read_dataset(tmp_path / "events", "connections")
    assert connections is not None and set(connections.column("result").to_pylist()) == {"ACCEPTED"}


def test_request_percentage_throttles_on_gateway_thread_time(gateway: GatewayThread, store_path: Path) -> None:
    # 0.001 % = 10 µs of gateway CPU per second: a handful of requests exceed it
    _set(store_path, "busy", "request_percentage", 0.001)
    time.sleep(0.5)
    wire = Wire(gateway.address())
    throttles = []
    for _ in range(20):
        wire.send(ApiVersionsRequest[2](), 2, client_id="busy")
        throttles.append(ApiVersionsResponse.decode(wire.recv(), version=2, header=True).throttle_time_ms)
        if throttles[-1] > 0:
            break
    assert 0 < throttles[-1] <= 1000  # request throttles are bounded by one window


def test_metrics_endpoint_shows_the_quota_sensors(tansu: Tansu, store_path: Path) -> None:
    _set(store_path, "metered", "producer_byte_rate", RATE)
    with GatewayThread(tansu.bootstrap, {"PLAINTEXT": "127.0.0.1:0"}, store_path, metrics_port=0) as gw:
        wire = Wire(gw.address())
        _produce(wire, f"m-{time.time_ns()}", "metered")
        assert gw.gateway is not None and gw.gateway.metrics_address is not None
        host, port = gw.gateway.metrics_address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    lines = [line for line in text.splitlines() if line.startswith("kafka_server_produce_byte_rate{")]
    assert any('client_id="metered"' in line for line in lines), lines


def test_pipelined_requests_do_not_slip_past_a_throttle(gateway: GatewayThread, store_path: Path) -> None:
    _set(store_path, "piped", "producer_byte_rate", 10_000)
    time.sleep(0.5)
    wire = Wire(gateway.address())
    topic = f"pipe-{time.time_ns()}"
    _produce(wire, topic, "piped")  # first: within the quota window's burst or not, it records 10 kB
    frames = []
    for _ in range(2):  # two requests sent back to back, without waiting for the first response
        builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
        builder.append(timestamp=None, key=None, value=VALUE, headers=[])
        builder.close()
        t = ProduceRequest.TopicProduceData
        request = ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
            t(name=topic, partition_data=[t.PartitionProduceData(index=0, records=bytes(builder.buffer()))])])
        wire.cid += 1
        request.with_header(correlation_id=wire.cid, client_id="piped")
        frames.append(bytes(request.encode(header=True, framed=True)))
    wire.sock.sendall(b"".join(frames))
    first = ProduceResponse.decode(wire.recv(), version=9, header=True)
    got_first = time.monotonic()
    ProduceResponse.decode(wire.recv(), version=9, header=True)
    waited_ms = (time.monotonic() - got_first) * 1000
    assert first.throttle_time_ms > 0
    # the second request was only read after the first's response plus its throttle (Kafka's guarantee)
    assert waited_ms >= first.throttle_time_ms * 0.8, (waited_ms, first.throttle_time_ms)
