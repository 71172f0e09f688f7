"""An idle client's upstream leg is closed and reopened with its next request
(``quotaflow.upstream.connections.max.idle.ms``): an idle client holds one descriptor, its own socket, as on a
broker; the client notices nothing, its quotas carry over, a bootstrap-port connection returns to the broker it
reached first, a gateway identity authenticates the new leg, and a SASL-passthrough leg is never closed.

The leg is observed three ways: the gateway's ``/metrics`` (``kafka_server_upstream_connection_count`` and
``..._idle_connection_close_total``), the connection's own state, and, independently of both, this process's
established TCP sockets to the broker's port (``/proc/self/fd`` and ``/proc/net/tcp``: the gateway runs on a thread
here, and nothing else in the test talks to the broker directly while it is counted)."""

from __future__ import annotations

import os
import socket
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import Producer
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceResponse

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import QuotaEntity
from quotaflow.events import API_PRODUCE, REQUESTS_DIR, read_dataset
from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.gateway.config import UPSTREAM_CONNECTIONS_MAX_IDLE_MS, GatewayConfig
from quotaflow.gateway.server import GatewayThread
from quotaflow.store import open_store
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu

from .conftest import GatewayFactory, RunningGateway
from .gateway_wire import Wire
from .passthrough_stack import passthrough_stack
from .test_e2e_brokers import _bootstrap, _leaders, _produce_request

pytestmark = pytest.mark.broker

IDLE_MS = 500  # the upstream idle setting in these tests; released within a housekeeping period after it
WAIT_S = 20.0  # generous bound for anything to happen on a loaded machine
QUOTA = 10_000.0  # producer_byte_rate, bytes/s
WINDOW_NUM = 30  # quota.window.num: the rate is over >= 29 s, so the first produce stays in it whatever the wait
VALUE = b"v" * 200_000  # one produce: ~6.9 KB/s over 29 s (under the quota); two: ~13.8 KB/s (over it)


def _wait(what: str, check: Callable[[], bool], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.05)


def _sockets_to(port: int) -> int:
    """This process's ESTABLISHED TCP connections to local port ``port`` (the broker's): its socket inodes in
    /proc/self/fd, matched with the kernel's TCP table."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if fields[3] == "01" and remote_port == port and fields[9] in inodes:
                    count += 1
    return count


def _metrics(gw: RunningGateway) -> dict[str, float]:
    with urllib.request.urlopen(f"{gw.http_url}/metrics", timeout=30) as response:
        body = response.read().decode()
    prefix = "kafka_server_upstream_"
    return {name.removeprefix(prefix): float(value) for name, value in
            (line.split() for line in body.splitlines() if line.startswith(prefix))}


def _legs(thread: GatewayThread) -> dict[int, bool]:
    """Client port -> whether that client connection holds an upstream socket now."""
    gateway = thread.gateway
    assert gateway is not None
    result: dict[int, bool] = thread.call(lambda: {c.client_port: c.upstream_open for c in gateway.connections})
    return result


def _idle_config(**overrides: object) -> GatewayConfig:
    return GatewayConfig.from_properties({UPSTREAM_CONNECTIONS_MAX_IDLE_MS: str(IDLE_MS)}, **overrides)


def _create_topic(bootstrap: str) -> str:
    topic = f"idle-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()  # its sockets closed now: only the gateway's legs reach the broker from this process
    return topic


class _KafkaPython:
    def __init__(self, bootstrap: str, client_id: str, **sasl: Any) -> None:
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks=1, linger_ms=0,
                                      max_request_size=1 << 20, connections_max_idle_ms=3_600_000,
                                      metadata_max_age_ms=3_600_000, **sasl)

    def send(self, topic: str, value: bytes) -> int:
        return int(self.producer.send(topic, value, partition=0).get(timeout=30).offset)

    def close(self) -> None:
        self.producer.close(timeout=5)


class _Librdkafka:
    def __init__(self, bootstrap: str, client_id: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "acks": 1,
                                  "linger.ms": 0, "message.max.bytes": 1 << 20,
                                  "topic.metadata.refresh.interval.ms": 3_600_000})

    def send(self, topic: str, value: bytes) -> int:
        reports: list[Any] = []
        self.producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: reports.append((err, msg)))
        assert self.producer.flush(30) == 0
        (err, msg), = reports
        assert err is None, err
        return int(msg.offset())

    def close(self) -> None:
        self.producer.flush(5)


@pytest.mark.parametrize("client", [_KafkaPython, _Librdkafka])
def test_an_idle_producers_leg_closes_and_reopens_under_its_quota(
        tansu: Tansu, gateway_factory: GatewayFactory, client: Any) -> None:
    gw = gateway_factory(metrics_port=0, config=_idle_config(quota_window_num=WINDOW_NUM))
    client_id = f"idle-{client.__name__.strip('_').lower()}-{uuid.uuid4().hex[:6]}"
    admin = Admin(open_store(gw.store_path))
    try:
        assert admin.alter([Alteration.of(QuotaEntity(client_id=client_id), {"producer_byte_rate": QUOTA})])[0].ok
    finally:
        admin.close()
    topic = _create_topic(tansu.bootstrap)
    time.sleep(1.0)  # the quota reaches the gateway within a store poll
    port = int(tansu.bootstrap.rsplit(":", 1)[1])
    producer = client(gw.bootstrap, client_id)
    try:
        assert producer.send(topic, VALUE) == 0
        before = _legs(gw.thread)
        assert any(before.values()) and _sockets_to(port) >= 1
        # idle: every leg is closed, every client connection stays
        _wait("the idle legs closed", lambda: not any(_legs(gw.thread).values()) and _sockets_to(port) == 0)
        assert set(_legs(gw.thread)) >= set(before)
        metrics = _metrics(gw)
        assert metrics["connection_count"] == 0 and metrics["idle_connection_close_total"] >= 1
        # the same client connection sends again: its leg reopens, the produce succeeds
        assert producer.send(topic, VALUE) == 1
        after = _legs(gw.thread)
        reopened = {p for p, open_ in after.items() if open_}
        assert reopened and reopened <= set(before)  # a connection that was there before the idle period
        assert _sockets_to(port) >= 1 and _metrics(gw)["connection_count"] >= 1
    finally:
        producer.close()
    # the quota state carried over: the second produce alone is under the quota, the two together are over it
    gw.flush_events()
    events = read_dataset(gw.events, REQUESTS_DIR)
    assert events is not None
    rows = sorted((r for r in events.to_pylist() if r["client_id"] == client_id and r["api_key"] == API_PRODUCE),
                  key=lambda r: r["seq"])
    assert len(rows) == 2, rows
    assert rows[0]["throttle_ms"] == 0 and rows[1]["throttle_ms"] > 0, [r["throttle_ms"] for r in rows]
    assert rows[0]["broker"] == rows[1]["broker"]


def test_a_bootstrap_connection_reopens_to_the_broker_it_reached_first(
        gateway_factory: GatewayFactory, mock_cluster: dict[int, tuple[str, int]]) -> None:
    """Three brokers behind the gateway; its bootstrap list begins with an address nothing listens on, so a
    bootstrap-port connection reaches the second entry. That first address starts listening while the connection
    is idle: the reopened leg must still go to the broker it reached (the partition it produces to is led there),
    never to the bootstrap list's first answer."""
    first = next(iter(mock_cluster))
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))  # bound, not listening: connecting to it is refused
    try:
        gw = gateway_factory(f"127.0.0.1:{squatter.getsockname()[1]}," + _bootstrap(mock_cluster),
                             metrics_port=0, config=_idle_config())
        for _ in range(20):  # the mock picks leaders at random: a topic with a partition led by the first broker
            topic = f"pin-{uuid.uuid4().hex[:8]}"
            led = [p for p, leader in _leaders(gw.bootstrap, topic).items() if leader == first]
            if led:
                break
        else:
            raise AssertionError("no partition led by the first bootstrap broker")
        time.sleep(IDLE_MS / 1000 * 3)  # the metadata connections above go idle too
        wire = Wire(gw.address)  # the bootstrap port
        wire.send(_produce_request(topic, led[0]), 7)
        assert ProduceResponse.decode(wire.recv(), version=7, header=True) \
            .responses[0].partition_responses[0].error_code == 0
        port = wire.sock.getsockname()[1]
        gateway = gw.thread.gateway
        broker = gw.thread.call(lambda: next(c.broker for c in gateway.connections if c.client_port == port))
        assert broker == str(first)  # its quotas are that broker's
        _wait("the wire connection's leg closed", lambda: _legs(gw.thread).get(port) is False)
        squatter.listen(8)  # the bootstrap list's first address answers now (and never speaks Kafka)
        wire.send(_produce_request(topic, led[0]), 7)  # NOT_LEADER_OR_FOLLOWER from any other broker
        assert ProduceResponse.decode(wire.recv(), version=7, header=True) \
            .responses[0].partition_responses[0].error_code == 0
        assert _legs(gw.thread)[port] is True
        assert gw.thread.call(lambda: next(c.broker for c in gateway.connections if c.client_port == port)) \
            == str(first)
    finally:
        squatter.close()


def test_a_gateway_identity_authenticates_the_reopened_leg(gateway_factory: GatewayFactory) -> None:
    sasl = {"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT"}
    cluster = gateway_factory(config=GatewayConfig.from_properties(sasl), listeners={"SASL_PLAINTEXT": "127.0.0.1:0"})
    with open_store(cluster.store_path) as store:  # the cluster knows the gateway's service identity only
        store.put_credential(hash_password("svc", "svc-secret", iterations=1000))
    identity = {"quotaflow.upstream.security.protocol": "SASL_PLAINTEXT",
                "quotaflow.upstream.sasl.mechanism": "PLAIN",
                "quotaflow.upstream.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                                       'required username="svc" password="svc-secret";',
                UPSTREAM_CONNECTIONS_MAX_IDLE_MS: str(IDLE_MS)}
    front = gateway_factory(cluster.bootstrap, listeners={"SASL_PLAINTEXT": "127.0.0.1:0"},
                            config=GatewayConfig.from_properties({**sasl, **identity}))
    with open_store(front.store_path) as store:
        store.put_credential(hash_password("alice", "alice-secret", iterations=1000))
    topic = f"svc-{uuid.uuid4().hex[:8]}"
    producer = _KafkaPython(front.bootstrap, "svc-idle", security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="alice-secret")
    try:
        assert producer.send(topic, b"a") == 0
        before = _legs(front.thread)
        _wait("the idle legs closed", lambda: not any(_legs(front.thread).values()))
        assert producer.send(topic, b"b") == 1  # an unauthenticated leg would be closed by the cluster
        assert {p for p, open_ in _legs(front.thread).items() if open_} <= set(before)
    finally:
        producer.close()
    cluster.flush_events()
    rows = read_dataset(cluster.events, REQUESTS_DIR)
    assert rows is not None
    assert [r["user"] for r in rows.to_pylist() if r["client_id"] == "svc-idle" and r["api_key"] == API_PRODUCE] \
        == ["svc", "svc"]  # both produces reached the cluster as the gateway's identity


def test_a_passthrough_leg_is_never_released(tansu: Tansu, tmp_path: Path) -> None:
    """In SASL passthrough the leg carries the client's own authentication: it stays open however long the client
    is idle (a new leg would not be authenticated), and the client keeps producing on it."""
    with passthrough_stack(tansu.bootstrap, tmp_path, front_props={UPSTREAM_CONNECTIONS_MAX_IDLE_MS: str(IDLE_MS)}) \
            as stack:
        producer = Producer({**stack.client_config("admin"), "client.id": "pt-idle", "acks": 1, "linger.ms": 0})
        topic = f"pt-{uuid.uuid4().hex[:8]}"
        reports: list[Any] = []
        producer.produce(topic, b"a", partition=0, on_delivery=lambda err, _m: reports.append(err))
        assert producer.flush(30) == 0 and reports == [None]
        legs = _legs(stack.front)
        assert any(legs.values())
        time.sleep(IDLE_MS / 1000 * 6)  # well past the setting: a released leg would be gone by now
        gateway = stack.front.gateway
        assert gateway is not None
        assert {p for p, open_ in _legs(stack.front).items() if open_} == {p for p, open_ in legs.items() if open_}
        samples = {s.name: s.value for s in stack.front.call(lambda: list(gateway.metric_samples(0)))}
        assert samples["idle-connection-close-total"] == 0 and samples["connection-count"] >= 1
        producer.produce(topic, b"b", partition=0, on_delivery=lambda err, _m: reports.append(err))
        assert producer.flush(30) == 0 and reports == [None, None]


def test_minus_one_keeps_every_leg(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(config=GatewayConfig.from_properties({UPSTREAM_CONNECTIONS_MAX_IDLE_MS: "-1"}))
    wire = Wire(gw.address)
    wire.send(ApiVersionsRequest[0](), 0)  # forwarded: the leg opens
    ApiVersionsResponse.decode(wire.recv(), version=0, header=True)
    port = wire.sock.getsockname()[1]
    assert _legs(gw.thread)[port] is True
    time.sleep(2.0)  # what 500 ms releases within a housekeeping period
    assert _legs(gw.thread)[port] is True


def test_a_tls_upstream_leg_reopens_over_tls(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """The upstream speaks TLS only (a gateway with an SSL listener in front of tansu): the reopened leg is a TLS
    connection checked against the same trust store, or the second produce could not be delivered."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(ca_file := str(tmp_path / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        server := str(tmp_path / "server.pem"))
    tls_broker = gateway_factory(config=GatewayConfig.from_properties(
        {"listener.security.protocol.map": "SSL:SSL", "ssl.keystore.location": server}),
        listeners={"SSL": "127.0.0.1:0"})
    host, port = tls_broker.thread.address("SSL")
    front = gateway_factory(f"{host}:{port}", config=GatewayConfig.from_properties(
        {"quotaflow.upstream.security.protocol": "SSL", "quotaflow.upstream.ssl.truststore.location": ca_file,
         UPSTREAM_CONNECTIONS_MAX_IDLE_MS: str(IDLE_MS)}))
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    producer = _Librdkafka(front.bootstrap, "tls-idle")
    try:
        assert producer.send(topic, b"a") == 0
        before = _legs(front.thread)
        _wait("the idle legs closed", lambda: not any(_legs(front.thread).values()))
        assert producer.send(topic, b"b") == 1
        assert {p for p, open_ in _legs(front.thread).items() if open_} <= set(before)
    finally:
        producer.close()


def test_a_reopen_that_fails_closes_the_client(gateway_factory: GatewayFactory) -> None:
    """The broker gone while the client was idle: its next request is held while the upstream is retried
    (quotaflow.upstream.connect.timeout.ms, 1 s here), then its connection is closed, as when a leg is lost."""
    with Tansu() as broker:
        gw = gateway_factory(broker.bootstrap, config=GatewayConfig.from_properties(
            {UPSTREAM_CONNECTIONS_MAX_IDLE_MS: str(IDLE_MS), "quotaflow.upstream.connect.timeout.ms": "1000"}))
        wire = Wire(gw.address)
        wire.send(ApiVersionsRequest[0](), 0)
        ApiVersionsResponse.decode(wire.recv(), version=0, header=True)
        port = wire.sock.getsockname()[1]
        _wait("the wire connection's leg closed", lambda: _legs(gw.thread).get(port) is False)
        broker.stop()
        wire.send(ApiVersionsRequest[0](), 0)
        assert wire.closed(timeout=WAIT_S)
        _wait("the client connection gone", lambda: port not in _legs(gw.thread))


@pytest.mark.slow
def test_near_the_open_file_limit_idle_legs_close_early(tansu: Tansu, tmp_path: Path) -> None:
    """A gateway process with 256 descriptors and max.connections=180 (above two a client, 96; within one a
    client, 192), the upstream idle setting at its default (60 s): 150 clients bootstrap one after the other and all
    are answered, because near the limit the longest-idle legs are closed early (the old gateway lowered
    max.connections to 96: the 97th waited in the backlog); then all 150 are answered again on their connections."""
    store = tmp_path / "few.db"
    open_store(store).close()
    config = tmp_path / "gw.properties"
    config.write_text("max.connections=180\n")
    gw = GatewayProcess(tansu.bootstrap, store, tmp_path / "gw", nofile=256, metrics=True,
                        extra_args=("--config", str(config))).start()
    clients: list[Wire] = []
    try:
        for _ in range(150):
            wire = Wire(("127.0.0.1", gw.port))
            wire.sock.settimeout(60)
            clients.append(wire)
            wire.send(MetadataRequest[1](topics=[]), 1)
            assert MetadataResponse.decode(wire.recv(), version=1, header=True).brokers
        pid = gw.pid
        assert pid is not None
        # the housekeeping keeps a headroom (1/20 of the limit, at least 16) by closing the longest-idle legs
        _wait("the gateway's descriptors back under its limit less the headroom",
              lambda: len(os.listdir(f"/proc/{pid}/fd")) <= 256 - 16)
        with urllib.request.urlopen(f"{gw.http_url}/metrics", timeout=30) as response:
            body = response.read().decode()
        closed = [float(line.split()[1]) for line in body.splitlines()
                  if line.startswith("kafka_server_upstream_idle_connection_close_total")]
        assert closed and closed[0] > 0
        for wire in clients:  # every connection still served: its leg reopened where it was closed
            wire.send(MetadataRequest[1](topics=[]), 1)
            assert MetadataResponse.decode(wire.recv(), version=1, header=True).brokers
    finally:
        for wire in clients:
            wire.sock.close()
        gw.stop()


def test_a_bootstrap_connection_whose_node_is_unknown_reopens_to_the_same_address(
        tansu: Tansu, gateway_factory: GatewayFactory) -> None:
    """The bootstrap list names tansu as ``localhost`` while it advertises 127.0.0.1: the node behind the bootstrap
    address is not known, so the connection's quotas are the gateway's own name and its leg is pinned by address.
    The list's first address (nothing listening at first) starts listening while the connection is idle: the
    reopened leg still reaches tansu, its quotas still under the same name."""
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    try:
        tansu_port = int(tansu.bootstrap.rsplit(":", 1)[1])
        gw = gateway_factory(f"127.0.0.1:{squatter.getsockname()[1]},localhost:{tansu_port}", config=_idle_config())
        wire = Wire(gw.address)
        wire.send(ApiVersionsRequest[0](), 0)
        ApiVersionsResponse.decode(wire.recv(), version=0, header=True)
        port = wire.sock.getsockname()[1]
        gateway = gw.thread.gateway
        assert gateway is not None

        def broker() -> str:
            return str(gw.thread.call(lambda: next(c.broker for c in gateway.connections if c.client_port == port)))

        assert broker() == "gateway"  # broker_key: the node behind localhost:<port> is not known
        _wait("the wire connection's leg closed", lambda: _legs(gw.thread).get(port) is False)
        squatter.listen(8)
        wire.send(MetadataRequest[1](topics=[]), 1)  # a listener that never answers would time this out
        assert MetadataResponse.decode(wire.recv(), version=1, header=True).brokers
        assert _legs(gw.thread)[port] is True and broker() == "gateway"
    finally:
        squatter.close()
