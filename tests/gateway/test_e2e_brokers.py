"""N brokers behind the gateway: librdkafka's mock cluster (3 brokers on 127.0.0.1) as the real upstream, real
confluent-kafka and kafka-python clients through the gateway, one gateway port per broker."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import QuotaEntity
from quotaflow.events import REQUESTS_DIR, read_dataset
from quotaflow.pipeline.decide import WindowSettings
from quotaflow.pipeline.replay import decisions
from quotaflow.pipeline.resolve import load_config
from quotaflow.store import open_store

from .conftest import GatewayFactory, RunningGateway
from .gateway_wire import Wire

pytestmark = pytest.mark.broker

PARTITIONS = 4  # the mock cluster's default for auto-created topics
NOT_LEADER_OR_FOLLOWER = 6


def _bootstrap(brokers: dict[int, tuple[str, int]]) -> str:
    return ",".join(f"{h}:{p}" for h, p in brokers.values())


def _create_topic(bootstrap: str) -> str:
    """A topic auto-created by the mock (it has no controller for CreateTopics), its leaders spread over brokers."""
    topic = f"n-{uuid.uuid4().hex[:10]}"
    _leaders(bootstrap, topic)
    return topic


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader node, through a producer's Metadata request (which auto-creates the topic)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for _ in range(50):
        md = producer.list_topics(topic, timeout=10).topics[topic]
        if md.error is None and len(md.partitions) == PARTITIONS:
            return {p.id: p.leader for p in md.partitions.values()}
        time.sleep(0.1)
    raise AssertionError(f"no metadata for {topic}")


@pytest.fixture
def gateway(gateway_factory: GatewayFactory, mock_cluster: dict[int, tuple[str, int]]) -> RunningGateway:
    return gateway_factory(_bootstrap(mock_cluster), metrics_port=0)


def test_each_broker_on_its_own_port_and_only_gateway_addresses_leave(
        gateway: RunningGateway, mock_cluster: dict[int, tuple[str, int]]) -> None:
    gw = gateway.thread.gateway
    nodes = gw.node_addresses["PLAINTEXT"]
    assert set(nodes) == set(mock_cluster)  # learned at startup
    ports = {port for _host, port in nodes.values()}
    assert len(ports) == 3 and gateway.address[1] not in ports
    upstream_ports = {port for _host, port in mock_cluster.values()}
    for address in [gateway.address, *nodes.values()]:  # Metadata on every gateway port names only gateway ports
        wire = Wire(address)
        wire.send(MetadataRequest[8](topics=None, allow_auto_topic_creation=False,
                                     include_cluster_authorized_operations=False,
                                     include_topic_authorized_operations=False), 8)
        md = MetadataResponse.decode(wire.recv(), version=8, header=True)
        assert {b.node_id: (b.host, b.port) for b in md.brokers} == nodes
        assert not {b.port for b in md.brokers} & upstream_ports
        wire.send(FindCoordinatorRequest[2](key="g", key_type=0), 2)
        fc = FindCoordinatorResponse.decode(wire.recv(), version=2, header=True)
        assert fc.error_code == 0 and (fc.host, fc.port) == nodes[fc.node_id]
    with urllib.request.urlopen(f"{gateway.http_url}/brokers", timeout=10) as resp:
        doc = json.loads(resp.read())
    assert doc["listeners"]["PLAINTEXT"]["nodes"] == {str(n): f"{h}:{p}" for n, (h, p) in nodes.items()}
    assert doc["upstream"] == {str(n): f"{h}:{p}" for n, (h, p) in sorted(mock_cluster.items())}


def _produce_request(topic: str, partition: int, value: bytes = b"x") -> Any:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16)
    builder.append(timestamp=None, key=None, value=value, headers=[])
    builder.close()
    t = ProduceRequest.TopicProduceData
    return ProduceRequest[7](transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        t(name=topic, partition_data=[t.PartitionProduceData(index=partition, records=bytes(builder.buffer()))])])


def _produce_one(address: tuple[str, int], topic: str, partition: int) -> int:
    wire = Wire(address)
    wire.send(_produce_request(topic, partition), 7)
    response = ProduceResponse.decode(wire.recv(), version=7, header=True)
    wire.sock.close()
    return int(response.responses[0].partition_responses[0].error_code)


def test_a_broker_port_reaches_that_broker(gateway: RunningGateway) -> None:
    topic = _create_topic(gateway.bootstrap)
    leaders = _leaders(gateway.bootstrap, topic)
    nodes = gateway.thread.gateway.node_addresses["PLAINTEXT"]
    partition, leader = next(iter(leaders.items()))
    other = next(n for n in nodes if n != leader)
    assert _produce_one(nodes[leader], topic, partition) == 0
    assert _produce_one(nodes[other], topic, partition) == NOT_LEADER_OR_FOLLOWER  # the mock checks leadership


def test_confluent_clients_spread_over_the_brokers(gateway: RunningGateway) -> None:
    for _ in range(20):  # the mock picks each partition's leader at random: take a topic led by all three
        topic = _create_topic(gateway.bootstrap)
        leaders = _leaders(gateway.bootstrap, topic)
        if len(set(leaders.values())) == 3:
            break
    assert len(set(leaders.values())) == 3
    sent = [f"m-{i}".encode() for i in range(300)]
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "client.id": "n-producer", "linger.ms": 5})
    for i, value in enumerate(sent):
        producer.produce(topic, value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    seen = {(b.host, b.port) for b in producer.list_topics(timeout=10).brokers.values()}
    assert seen == set(gateway.thread.gateway.node_addresses["PLAINTEXT"].values())
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "client.id": "n-consumer", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])  # the group coordinator is found through the rewritten FindCoordinator
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(sent) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)
    gateway.flush_events()
    events = read_dataset(gateway.events, REQUESTS_DIR)
    assert events is not None
    rows = events.to_pylist()
    produce_brokers = {r["broker"] for r in rows if r["client_id"] == "n-producer" and r["api_key"] == 0}
    assert produce_brokers == {str(n) for n in set(leaders.values())}  # quotas and events per upstream broker
    assert {str(n) for n in set(leaders.values())} <= set(gateway.thread.gateway.broker_quotas.brokers)


def test_kafka_python_through_the_gateway(gateway: RunningGateway) -> None:
    topic = _create_topic(gateway.bootstrap)
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, client_id="kp-n", linger_ms=5)
    try:
        futures = [producer.send(topic, f"k-{i}".encode(), partition=i % PARTITIONS) for i in range(60)]
        producer.flush(30)
        assert all(f.get(timeout=10).offset >= 0 for f in futures)
        brokers = {(b.host, b.port) for b in producer._metadata.brokers()}
    finally:
        producer.close()
    assert brokers == set(gateway.thread.gateway.node_addresses["PLAINTEXT"].values())
    consumer = KafkaConsumer(topic, bootstrap_servers=gateway.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    try:
        values = sorted(m.value for m in consumer)
    finally:
        consumer.close()
    assert values == sorted(f"k-{i}".encode() for i in range(60))


def _free_range(n: int) -> int:
    """A base port with base+1..base+n free right now (racy, as every free-port helper)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        socks = []
        try:
            for port in range(base + 1, base + n + 1):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise AssertionError("no free port range")


def test_port_base_is_base_plus_node_id(gateway_factory: GatewayFactory,
                                        mock_cluster: dict[int, tuple[str, int]]) -> None:
    base = _free_range(max(mock_cluster))
    gw = gateway_factory(_bootstrap(mock_cluster), broker_port_base={"PLAINTEXT": base})
    nodes = gw.thread.gateway.node_addresses["PLAINTEXT"]
    assert {n: port for n, (_h, port) in nodes.items()} == {n: base + n for n in mock_cluster}


def test_single_bootstrap_broker_is_served_on_the_listener_port(
        gateway_factory: GatewayFactory, mock_cluster: dict[int, tuple[str, int]]) -> None:
    first = min(mock_cluster)
    host, port = mock_cluster[first]
    gw = gateway_factory(f"{host}:{port}")
    nodes = gw.thread.gateway.node_addresses["PLAINTEXT"]
    assert nodes[first] == gw.address  # its own advertised address is the bootstrap: no extra port
    assert len({p for _h, p in nodes.values()}) == 3


def test_an_unreachable_bootstrap_address_is_skipped(
        gateway_factory: GatewayFactory, mock_cluster: dict[int, tuple[str, int]], port: int) -> None:
    gw = gateway_factory(f"127.0.0.1:{port}," + _bootstrap(mock_cluster))  # nothing listens on the first
    assert set(gw.thread.gateway.node_addresses["PLAINTEXT"]) == set(mock_cluster)
    wire = Wire(gw.address)
    wire.send(MetadataRequest[1](topics=[]), 1)
    assert len(MetadataResponse.decode(wire.recv(), version=1, header=True).brokers) == 3


def test_cli_ready_line_names_every_broker_port(mock_cluster: dict[int, tuple[str, int]], tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "quotaflow.cli.main", "gateway", "--upstream", _bootstrap(mock_cluster),
         "--listen", "PLAINTEXT=127.0.0.1:0", "--store", str(tmp_path / "q.db"), "--metrics-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        ports = {int(n): int(p) for n, p in re.findall(r"PLAINTEXT\.(\d+)=127\.0\.0\.1:(\d+)", line)}
        assert set(ports) == set(mock_cluster), line
        metrics = re.search(r"metrics=(http://\S+)", line)
        assert metrics, line
        with urllib.request.urlopen(f"{metrics.group(1)}/brokers", timeout=10) as resp:
            doc = json.loads(resp.read())
        assert doc["listeners"]["PLAINTEXT"]["nodes"] == {str(n): f"127.0.0.1:{p}" for n, p in sorted(ports.items())}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0


def test_replay_of_the_event_log_reproduces_the_per_broker_decisions(
        gateway_factory: GatewayFactory, mock_cluster: dict[int, tuple[str, int]], tmp_path: Path) -> None:
    """Quotas are per upstream broker, as on Kafka: a producer over its byte rate on each of three brokers is
    throttled by each broker's own managers, and replaying the event log (broker column = node id) decides the same
    throttles row by row."""
    store = tmp_path / "quotas.db"
    with open_store(store) as s:
        Admin(s).alter([Alteration.of(QuotaEntity(client_id="metered"), {"producer_byte_rate": 20_000.0})])
    gw = gateway_factory(_bootstrap(mock_cluster), store=store)
    topic = _create_topic(gw.bootstrap)
    leaders = _leaders(gw.bootstrap, topic)
    nodes = gw.thread.gateway.node_addresses["PLAINTEXT"]
    by_node = {leader: partition for partition, leader in leaders.items()}
    for node, partition in sorted(by_node.items()):
        for _ in range(3):  # a new connection each time: a throttled one would be muted (KIP-219) and wait
            wire = Wire(nodes[node])
            wire.send(_produce_request(topic, partition, b"v" * 100_000), 7, client_id="metered")
            assert ProduceResponse.decode(wire.recv(), version=7, header=True).responses
            wire.sock.close()
    gw.flush_events()
    events = read_dataset(gw.events, REQUESTS_DIR)
    assert events is not None
    live = {r["seq"]: r for r in events.to_pylist() if r["client_id"] == "metered"}
    assert {r["broker"] for r in live.values()} == {str(n) for n in by_node}
    # each broker throttles on its own: 100 kB then 200 kB fit its window, 300 kB does not (with one gateway-wide
    # quota the second broker's first request would already be over)
    for node in by_node:
        throttles = [r["throttle_ms_produce"] for r in sorted(live.values(), key=lambda r: r["seq"])
                     if r["broker"] == str(node)]
        assert throttles[0] == 0 and max(throttles) > 0
    replayed, _windows = decisions(events, load_config(store), WindowSettings(), with_inputs=True)
    again = {r["seq"]: r for r in replayed.to_pylist() if r["client_id"] == "metered"}
    for seq, row in live.items():
        assert again[seq]["throttle_ms_produce"] == row["throttle_ms_produce"], (seq, row["broker"])
