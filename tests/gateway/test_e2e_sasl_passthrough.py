"""SASL passthrough with real clients: the cluster's own credentials authenticate the client, through the gateway.

The authenticating upstream is a second gateway terminating SASL/PLAIN (with the credentials in its own store) in
front of tansu: neither tansu 0.6.0 (``--authentication`` accepts no mechanism a client can use before any user
exists, and its users live in memory storage) nor librdkafka's mock cluster authenticates clients here."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaProducer
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from quotaflow.events import REQUESTS_DIR, read_dataset
from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.gateway.config import GatewayConfig
from quotaflow.store import open_store
from quotaflow.store.scram import scram_credential

from .conftest import GatewayFactory
from .gateway_wire import Wire

pytestmark = pytest.mark.broker

SASL = {"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT"}


def test_clients_authenticate_with_the_cluster_and_are_metered_by_their_principal(
        gateway_factory: GatewayFactory) -> None:
    cluster = gateway_factory(config=GatewayConfig.from_properties(SASL), listeners={"SASL_PLAINTEXT": "127.0.0.1:0"})
    with open_store(cluster.store_path) as store:  # the cluster's credentials; the front gateway's store has none
        store.put_credential(hash_password("alice", "alice-secret", iterations=1000))
    front = gateway_factory(cluster.bootstrap, listeners={"SASL_PLAINTEXT": "127.0.0.1:0"},
                            config=GatewayConfig.from_properties(
                                {**SASL, "quotaflow.upstream.security.protocol": "SASL_PLAINTEXT"}))
    wire = Wire(front.address)
    wire.send(ApiVersionsRequest[3](client_software_name="t", client_software_version="1"), 3)
    offered = {a.api_key: (a.min_version, a.max_version)
               for a in ApiVersionsResponse.decode(wire.recv(), version=3, header=True).api_keys}
    assert offered[ApiKey.SaslHandshake] == (1, 1)  # the upstream's, from v1 (v0's raw tokens are not forwarded)
    topic = f"pt-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=front.bootstrap, client_id="pt-producer",
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="alice", sasl_plain_password="alice-secret")
    try:
        offsets = [producer.send(topic, b"p%d" % i, partition=0).get(timeout=15).offset for i in range(10)]
    finally:
        producer.close()
    assert offsets == list(range(10))
    for gw in (front, cluster):
        gw.flush_events()
    front_rows = read_dataset(front.events, REQUESTS_DIR)
    cluster_rows = read_dataset(cluster.events, REQUESTS_DIR)
    assert front_rows is not None and cluster_rows is not None
    produced = [r for r in front_rows.to_pylist() if r["client_id"] == "pt-producer" and r["api_key"] == 0]
    assert produced and {r["user"] for r in produced} == {"alice"}  # metered on the principal the cluster accepted
    assert {r["user"] for r in cluster_rows.to_pylist() if r["client_id"] == "pt-producer" and r["api_key"] == 0} \
        == {"alice"}  # the cluster authenticated alice herself, not a gateway identity
    # a wrong password is the cluster's to refuse: nothing is delivered
    reports: list[Any] = []
    bad = Producer({"bootstrap.servers": front.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "wrong",
                    "message.timeout.ms": 3000, "log_level": 0})
    bad.produce(topic, b"x", on_delivery=lambda err, _msg: reports.append(err))
    bad.flush(10)
    assert len(reports) == 1 and reports[0] is not None


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_terminate_mode_authenticates_upstream_as_the_gateway(gateway_factory: GatewayFactory,
                                                              mechanism: str) -> None:
    cluster = gateway_factory(config=GatewayConfig.from_properties(SASL), listeners={"SASL_PLAINTEXT": "127.0.0.1:0"})
    with open_store(cluster.store_path) as store:  # the cluster knows the gateway's service identity only
        store.put_credential(hash_password("svc", "svc-secret", iterations=1000))
        store.put_scram_credential(scram_credential("svc", "SCRAM-SHA-512", "svc-secret", iterations=4096))
    identity = {"quotaflow.upstream.security.protocol": "SASL_PLAINTEXT",
                "quotaflow.upstream.sasl.mechanism": mechanism,
                "quotaflow.upstream.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                                                       'required username="svc" password="svc-secret";'}
    front = gateway_factory(cluster.bootstrap, listeners={"SASL_PLAINTEXT": "127.0.0.1:0"},
                            config=GatewayConfig.from_properties({**SASL, **identity}))
    with open_store(front.store_path) as store:  # the front gateway's own users
        store.put_credential(hash_password("alice", "alice-secret", iterations=1000))
    assert front.thread.gateway.brokers.upstream  # startup discovery ran, authenticated as svc
    producer = KafkaProducer(bootstrap_servers=front.bootstrap, client_id="svc-producer",
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="alice", sasl_plain_password="alice-secret")
    try:
        assert producer.send(f"svc-{uuid.uuid4().hex[:8]}", b"x", partition=0).get(timeout=15).offset == 0
    finally:
        producer.close()
    for gw in (front, cluster):
        gw.flush_events()
    front_rows, cluster_rows = read_dataset(front.events, REQUESTS_DIR), read_dataset(cluster.events, REQUESTS_DIR)
    assert front_rows is not None and cluster_rows is not None
    assert {r["user"] for r in front_rows.to_pylist() if r["client_id"] == "svc-producer" and r["api_key"] == 0} \
        == {"alice"}  # metered at the gateway as its own user
    assert {r["user"] for r in cluster_rows.to_pylist() if r["client_id"] == "svc-producer" and r["api_key"] == 0} \
        == {"svc"}  # the cluster sees the gateway's identity


def test_a_refused_service_identity_forwards_nothing(gateway_factory: GatewayFactory) -> None:
    cluster = gateway_factory(config=GatewayConfig.from_properties(SASL), listeners={"SASL_PLAINTEXT": "127.0.0.1:0"})
    front = gateway_factory(cluster.bootstrap, config=GatewayConfig.from_properties(
        {"quotaflow.upstream.security.protocol": "SASL_PLAINTEXT", "quotaflow.upstream.sasl.mechanism": "PLAIN",
         "quotaflow.upstream.sasl.jaas.config": 'x required username="nobody" password="nope";'}))
    assert front.thread.gateway.brokers.upstream == {}  # discovery was refused
    wire = Wire(front.address)
    wire.send(ApiVersionsRequest[0](), 0)
    assert wire.closed()  # no upstream connection: the client's connection ends
