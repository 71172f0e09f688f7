"""Quota enforcement through the gateway against a real tansu: KIP-219 throttle fields, muting, live updates."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import QuotaEntity
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.server import GatewayThread
from quotaflow.store import open_store
from quotaflow.tansu import Tansu

try:  # tests/gateway is a package when its __init__.py is present, else a rootdir on sys.path
    from .gateway_wire import Wire
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
