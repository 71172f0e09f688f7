"""TLS on both sides of the gateway with real clients: confluent-kafka over SSL (client certificates mapped to quota
principals) and SASL_SSL, and an SSL upstream.

tansu 0.6.0 cannot serve TLS here (its ``--cert`` and ``--key`` flags are declared as conflicting, and ``--cert``
alone serves no handshake), so the SSL upstream is a second gateway with an SSL listener in front of tansu: a real
TLS Kafka-protocol server, checked by hostname against the test CA."""

from __future__ import annotations

import socket
import ssl
import struct
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from quotaflow.events import REQUESTS_DIR, read_dataset
from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.gateway.config import GatewayConfig
from quotaflow.store import open_store

from .conftest import GatewayFactory, RunningGateway

pytestmark = pytest.mark.broker

RULES = "RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    files = {
        "ca": ca.cert_pem,
        "server": ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem,
    }
    alice = ca.issue_cert("alice", common_name="Alice", organization_unit_name="Eng", organization_name="Corp")
    files["alice_key"], files["alice_cert"] = alice.private_key_pem, alice.cert_chain_pems[0]
    for name, blob in files.items():
        blob.write_to_path(str(tmp / f"{name}.pem"))
    return {name: str(tmp / f"{name}.pem") for name in files}


def _gateway(factory: GatewayFactory, props: dict[str, str], listeners: dict[str, str],
             **kwargs: Any) -> RunningGateway:
    return factory(config=GatewayConfig.from_properties(props), listeners=listeners, **kwargs)


def _ssl_client(pki: dict[str, str], gw: RunningGateway, listener: str, **extra: str) -> dict[str, Any]:
    host, port = gw.thread.address(listener)
    return {"bootstrap.servers": f"{host}:{port}", "security.protocol": "SSL", "ssl.ca.location": pki["ca"],
            "log_level": 0, **extra}


def _round_trip(producer_config: dict[str, Any], consumer_config: dict[str, Any], n: int = 50) -> list[bytes]:
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    producer = Producer(producer_config)
    sent = [f"m{i}".encode() for i in range(n)]
    for value in sent:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({**consumer_config, "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    assert got == sent
    return got


def test_ssl_listener_maps_client_certificates_to_quota_principals(gateway_factory: GatewayFactory,
                                                                   pki: dict[str, str]) -> None:
    props = {"listener.security.protocol.map": "SSL:SSL,PLAINTEXT:PLAINTEXT",
             "listener.name.ssl.ssl.keystore.location": pki["server"],
             "listener.name.ssl.ssl.truststore.location": pki["ca"],
             "listener.name.ssl.ssl.client.auth": "required",
             "listener.name.ssl.ssl.principal.mapping.rules": RULES}
    gw = _gateway(gateway_factory, props, {"SSL": "127.0.0.1:0", "PLAINTEXT": "127.0.0.1:0"})
    client = _ssl_client(pki, gw, "SSL", **{"ssl.certificate.location": pki["alice_cert"],
                                            "ssl.key.location": pki["alice_key"], "client.id": "cert-client"})
    _round_trip(client, client)
    gw.flush_events()
    events = read_dataset(gw.events, REQUESTS_DIR)
    assert events is not None
    users = {r["user"] for r in events.to_pylist() if r["client_id"] == "cert-client"}
    assert users == {"alice@eng"}  # CN=Alice,OU=Eng,O=Corp through the rule, lower-cased
    # without a client certificate no request is answered (TLS 1.3 refuses it after the client's handshake); with
    # one it is, and the gateway goes on serving everyone else
    host, port = gw.thread.address("SSL")
    context = ssl.create_default_context(cafile=pki["ca"])
    assert _api_versions_over_tls(context, host, port) is None
    context.load_cert_chain(pki["alice_cert"], pki["alice_key"])
    assert _api_versions_over_tls(context, host, port) == 0
    _round_trip(client, client, n=5)


def _api_versions_over_tls(context: ssl.SSLContext, host: str, port: int) -> int | None:
    """ApiVersions' error code, or None when the connection ends without an answer."""
    request = ApiVersionsRequest[0]()
    request.with_header(correlation_id=1, client_id="probe")
    try:
        with context.wrap_socket(socket.create_connection((host, port), timeout=10), server_hostname=host) as s:
            s.sendall(bytes(request.encode(version=0, header=True, framed=True)))
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return None
                data += chunk
                if len(data) >= 4 and len(data) >= 4 + struct.unpack(">i", data[:4])[0]:
                    return int(ApiVersionsResponse.decode(data[4:], version=0, header=True).error_code)
    except (ssl.SSLError, ConnectionError):
        return None


def test_sasl_ssl_listener_takes_the_sasl_identity(gateway_factory: GatewayFactory, pki: dict[str, str]) -> None:
    props = {"listener.security.protocol.map": "EXTERNAL:SASL_SSL",
             "ssl.keystore.type": "PEM", "ssl.keystore.location": pki["server"]}
    gw = _gateway(gateway_factory, props, {"EXTERNAL": "127.0.0.1:0"})
    with open_store(gw.store_path) as store:
        store.put_credential(hash_password("bob", "bob-secret", iterations=1000))
    client = _ssl_client(pki, gw, "EXTERNAL", **{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                                 "sasl.username": "bob", "sasl.password": "bob-secret",
                                                 "client.id": "sasl-ssl"})
    _round_trip(client, client)
    gw.flush_events()
    events = read_dataset(gw.events, REQUESTS_DIR)
    assert events is not None
    rows = [r for r in events.to_pylist() if r["client_id"] == "sasl-ssl" and r["api_key"] in (0, 1)]
    assert rows and {r["user"] for r in rows} == {"bob"}


def test_ssl_upstream(gateway_factory: GatewayFactory, pki: dict[str, str], tmp_path: Path) -> None:
    tls_broker = _gateway(gateway_factory, {"listener.security.protocol.map": "SSL:SSL",
                                            "ssl.keystore.location": pki["server"]}, {"SSL": "127.0.0.1:0"})
    host, port = tls_broker.thread.address("SSL")
    upstream = {"quotaflow.upstream.security.protocol": "SSL",
                "quotaflow.upstream.ssl.truststore.location": pki["ca"]}
    front = _gateway(gateway_factory, {**upstream, "listener.security.protocol.map": "SSL:SSL",
                                       "ssl.keystore.location": pki["server"]},
                     {"SSL": "127.0.0.1:0"}, upstream=f"{host}:{port}")
    client = _ssl_client(pki, front, "SSL", **{"client.id": "tls-both-ways"})
    _round_trip(client, client)
    # an upstream certificate the gateway does not trust: no connection is forwarded
    untrusting = _gateway(gateway_factory, {"quotaflow.upstream.security.protocol": "SSL"},
                          {"PLAINTEXT": "127.0.0.1:0"}, upstream=f"{host}:{port}")
    producer = Producer({"bootstrap.servers": untrusting.bootstrap, "log_level": 0, "message.timeout.ms": 3000})
    reports: list[Any] = []
    producer.produce("never", b"x", on_delivery=lambda err, _msg: reports.append(err))
    producer.flush(10)
    assert len(reports) == 1 and reports[0] is not None  # undelivered
    assert untrusting.thread.gateway.brokers.upstream == {}  # never learned a broker through an untrusted link


def test_every_broker_port_of_an_ssl_listener_speaks_tls(gateway_factory: GatewayFactory, pki: dict[str, str],
                                                         mock_cluster: dict[int, tuple[str, int]]) -> None:
    bootstrap = ",".join(f"{h}:{p}" for h, p in mock_cluster.values())
    props = {"listener.security.protocol.map": "SSL:SSL", "ssl.keystore.location": pki["server"]}
    gw = _gateway(gateway_factory, props, {"SSL": "127.0.0.1:0"}, upstream=bootstrap)
    nodes = gw.thread.gateway.node_addresses["SSL"]
    assert set(nodes) == set(mock_cluster)
    context = ssl.create_default_context(cafile=pki["ca"])
    for host, port in nodes.values():  # each broker's own gateway port is TLS, checked against the certificate
        assert _api_versions_over_tls(context, host, port) == 0
    client = _ssl_client(pki, gw, "SSL", **{"client.id": "tls-n"})
    producer = Producer(client)
    topic = f"tls-n-{uuid.uuid4().hex[:8]}"
    partitions = producer.list_topics(topic, timeout=10).topics[topic].partitions
    reports: list[Any] = []
    for i in range(40):
        producer.produce(topic, b"x", partition=i % len(partitions), on_delivery=lambda err, _m: reports.append(err))
    assert producer.flush(30) == 0
    assert len(reports) == 40 and not any(reports)
    seen = {(b.host, b.port) for b in producer.list_topics(timeout=10).brokers.values()}
    assert seen == set(nodes.values())
