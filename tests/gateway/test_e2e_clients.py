"""Real Kafka clients through the gateway: every message produced comes back, and clients only see the gateway."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import KafkaError as KafkaErrorCode
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from quotaflow.events import CONNECTIONS_DIR, REQUESTS_DIR, read_dataset
from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.store import open_store

from .conftest import GatewayFactory, RunningGateway

pytestmark = pytest.mark.broker

N = 500


def new_topic(bootstrap: str) -> str:
    """A fresh one-partition topic, created through the gateway (tansu's auto-created topics have several)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="setup")
    try:
        admin.create_topics([NewTopic(name, 1, 1)])
    finally:
        admin.close()
    return name


def consume_assigned(bootstrap: str, topic: str, n: int, **config: object) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000, **config
    )
    consumer.assign([TopicPartition(topic, 0)])
    out: list[bytes] = []
    try:
        for record in consumer:
            out.append(record.value)
            if len(out) == n:
                break
    finally:
        consumer.close()
    return out


def test_kafka_python_round_trip(gateway: RunningGateway) -> None:
    topic = new_topic(gateway.bootstrap)
    sent = [f"kp-{i}".encode() * (1 + i % 7) for i in range(N)]
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, client_id="kp-producer", linger_ms=5)
    try:
        futures = [producer.send(topic, value) for value in sent]
        producer.flush(30)
        offsets = [f.get(timeout=10).offset for f in futures]
        # the producer learned the cluster from the gateway's rewritten Metadata: only the gateway's address
        brokers = {(b.host, b.port) for b in producer._metadata.brokers()}
    finally:
        producer.close()
    assert offsets == list(range(N))
    assert brokers == {gateway.address}
    assert consume_assigned(gateway.bootstrap, topic, N, client_id="kp-consumer") == sent
    gateway.flush_events()
    events = read_dataset(gateway.events, REQUESTS_DIR)
    assert events is not None
    produced = events.filter(events.column("client_id").to_numpy(zero_copy_only=False) == "kp-producer")
    assert set(produced.column("api_key").to_pylist()) >= {0, 3}  # Produce and Metadata were logged
    assert set(produced.column("user").to_pylist()) == {"ANONYMOUS"}
    connections = read_dataset(gateway.events, CONNECTIONS_DIR)
    assert connections is not None  # every accepted socket is a connection event with its admission decision
    assert set(connections.column("result").to_pylist()) == {"ACCEPTED"}
    assert set(connections.column("client_ip").to_pylist()) == {"127.0.0.1"}
    assert connections.num_rows >= 3  # setup admin, producer, consumer


def test_confluent_kafka_round_trip_with_a_consumer_group(gateway: RunningGateway) -> None:
    topic = new_topic(gateway.bootstrap)
    sent = [f"ck-{i}".encode() for i in range(N)]
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "client.id": "ck-producer", "linger.ms": 5})
    delivered: list[int] = []
    for value in sent:
        producer.produce(topic, value, on_delivery=lambda err, msg: delivered.append(-1 if err else msg.offset()))
    assert producer.flush(30) == 0
    assert sorted(delivered) == list(range(N))
    brokers = AdminClient({"bootstrap.servers": gateway.bootstrap}).list_topics(timeout=10).brokers
    assert {(b.host, b.port) for b in brokers.values()} == {gateway.address}
    # a consumer group: FindCoordinator is rewritten to the gateway too, or the group never forms
    consumer = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
        }
    )
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < N and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == sent


def test_sasl_plain_clients_carry_their_principal(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory()
    qs = open_store(gw.store_path)
    qs.put_credential(hash_password("alice", "alice-secret", iterations=1000))
    qs.close()
    topic = new_topic(gw.bootstrap)
    sasl = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice"}
    producer = KafkaProducer(
        bootstrap_servers=gw.bootstrap, client_id="sasl-producer", sasl_plain_password="alice-secret", **sasl
    )
    try:
        for i in range(20):
            producer.send(topic, b"s%d" % i)
        producer.flush(30)
    finally:
        producer.close()
    assert len(consume_assigned(gw.bootstrap, topic, 20)) == 20
    gw.flush_events()
    events = read_dataset(gw.events, REQUESTS_DIR)
    assert events is not None
    rows = [r for r in events.to_pylist() if r["client_id"] == "sasl-producer"]
    # ApiVersions and the SASL exchange itself come before authentication, as ANONYMOUS; everything after is alice
    assert {r["user"] for r in rows if r["api_key"] not in (17, 18, 36)} == {"alice"}
    assert {r["user"] for r in rows if r["api_key"] == 0} == {"alice"}
    # a wrong password is refused with Kafka's SASL error, seen by librdkafka as an authentication failure
    errors: list[KafkaErrorCode] = []
    bad = Producer(
        {
            "bootstrap.servers": gw.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "wrong",
            "error_cb": errors.append,
            "log_level": 0,
        }
    )
    bad.produce(topic, b"x")
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        bad.poll(0.1)
    bad.purge()
    assert errors and errors[0].code() == KafkaErrorCode._AUTHENTICATION
    assert "Invalid username or password" in errors[0].str()
