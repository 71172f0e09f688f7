"""``quotaflow gateway --workers 2``: two gateway processes accept on one port (SO_REUSEPORT), both serve clients,
share the kafka:// store, and stop with their supervisor."""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from quotaflow.admin.wire import WireAdmin
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.filters import QuotaFilter
from quotaflow.store.kafka import KafkaStore
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import LOOPBACK, Tansu, api_versions_probe

pytestmark = pytest.mark.broker

_READY = re.compile(r"quotaflow gateway ready: PLAINTEXT=[^\s:]+:(\d+) metrics=http://[^\s:]+:(\d+)")


def _accepted(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://{LOOPBACK}:{metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = re.search(r"^kafka_server_socket_server_metrics_broker_connection_accept_rate (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def _children(pid: int) -> set[int]:
    return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def test_two_workers_share_a_port_and_a_store(tansu: Tansu, tmp_path: Path) -> None:
    store = f"kafka://{tansu.bootstrap}/quotas-{uuid.uuid4().hex[:8]}"
    with KafkaStore(store) as s:
        s.alter([(QuotaEntity(user="alice"), {"producer_byte_rate": 1e6})])
    gw = GatewayProcess(tansu.bootstrap, store, tmp_path, metrics=True, extra_args=("--workers", "2")).start()
    try:
        assert gw.pid is not None
        deadline = time.monotonic() + 30
        while len(ready := _READY.findall(gw.log_path.read_text())) < 2:
            assert time.monotonic() < deadline, gw.log_path.read_text()[-2000:]
            time.sleep(0.1)
        workers = _children(gw.pid)
        assert len(workers) == 2
        assert {int(port) for port, _ in ready} == {gw.port}  # one port, two processes
        for _ in range(60):
            assert api_versions_probe(LOOPBACK, gw.port)
        rates = [_accepted(int(metrics)) for _, metrics in ready]
        assert all(rate > 0 for rate in rates), rates  # the kernel gave each worker some of the connections
        # each worker serves the same store; a round trip through the shared port works whichever answers
        for _ in range(4):
            wire = WireAdmin(gw.bootstrap)
            try:
                assert {d.entity: d.values for d in wire.describe(QuotaFilter())} == {
                    QuotaEntity(user="alice"): {"producer_byte_rate": 1e6}}
            finally:
                wire.close()
        topic = f"w-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
        producer = Producer({"bootstrap.servers": gw.bootstrap})
        for i in range(10):
            producer.produce(topic, b"m%d" % i)
        assert producer.flush(20) == 0
        consumer = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": topic, "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
        consumer.close()
        assert got == [b"m%d" % i for i in range(10)]
    finally:
        gw.stop()
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
