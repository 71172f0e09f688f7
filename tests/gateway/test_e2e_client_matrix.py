"""The real-client matrix (issue 22 item 9): clients no one here wrote, through the gateway in front of tansu.

Each client, over SASL_SSL (certificates made here with trustme), produces and reads its messages back through a
consumer group, then reads a topic of ~1 MB record batches under ``consumer_byte_rate=100000`` (the starvation case
of issue 22 item 1: it must never read 0 bytes). The quota phase assigns the partition (Node: a group, timed from
its first message), since tansu answers a JoinGroup only after about half the member's session timeout (~23 s with
librdkafka's default 45 s) and the phase is timed. Every group member asks for Kafka's least session timeout
(``group.min.session.timeout.ms``, 6 s), so its JoinGroup is answered in ~3 s. Clients: Debian's kcat
(librdkafka 2.0.2) with PLAIN and with SCRAM (which needs ``quotaflow.sasl.scram.legacy.client.nonce=true``:
librdkafka < 2.6.1 repeats its nonce), confluent-kafka, kafka-python, aiokafka and @platformatic/kafka (Node).
Bounded: every client call has a timeout, and each quota phase lasts QUOTA_S. A client is skipped only when it is
not installed (``make setup`` installs them all).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import QuotaEntity
from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.gateway.config import GatewayConfig
from quotaflow.store import open_store
from quotaflow.store.scram import scram_credential
from quotaflow.testing.tansu import Tansu

from .conftest import GatewayFactory, RunningGateway
from .test_e2e_fetch_progress import large_batch_topic

pytestmark = [pytest.mark.broker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
NODE_SCRIPT = Path(__file__).parent / "node" / "client_matrix.mjs"
USER, PASSWORD = "matrix", "matrix-secret"
Q = 100_000  # consumer_byte_rate of each client's quota phase
QUOTA_S = 8.0
COUNT = 20  # messages of each round trip
SESSION_MS, HEARTBEAT_MS = 6000, 1000  # a group member's session timeout (Kafka's least) and heartbeat interval


@dataclass(frozen=True)
class Target:
    """Where and how one client connects: the gateway's SASL_SSL listener, the test CA, its mechanism and ids."""

    bootstrap: str
    ca: str
    mechanism: str
    client_id: str
    topic: str = ""

    @property
    def group(self) -> str:
        return f"g-{self.client_id}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("matrix-tls")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(tmp / "server.pem"))
    return {"ca": str(tmp / "ca.pem"), "server": str(tmp / "server.pem")}


@pytest.fixture(scope="module")
def large_batches(tansu: Tansu) -> Iterator[str]:
    """A topic of ~1 MB record batches (90 kB records), filled straight at tansu, read by every client."""
    yield large_batch_topic(tansu.bootstrap, 4_000_000, 90_000)


def sasl_ssl_gateway(gateway_factory: GatewayFactory, pki: dict[str, str], *, legacy_nonce: bool) -> RunningGateway:
    props = {"listener.security.protocol.map": "EXTERNAL:SASL_SSL", "ssl.keystore.type": "PEM",
             "ssl.keystore.location": pki["server"],
             "quotaflow.sasl.scram.legacy.client.nonce": str(legacy_nonce).lower()}
    gw = gateway_factory(config=GatewayConfig.from_properties(props), listeners={"EXTERNAL": "127.0.0.1:0"})
    with open_store(gw.store_path) as store:
        store.put_credential(hash_password(USER, PASSWORD, iterations=1000))
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            store.put_scram_credential(scram_credential(USER, mechanism, PASSWORD))
    return gw


def new_topic(bootstrap: str) -> str:
    name = f"matrix-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    return name


def values(n: int, client: str) -> list[bytes]:
    return [f"{client}-{i}".encode() for i in range(n)]


# -- librdkafka: kcat (Debian's, librdkafka 2.0.2) and confluent-kafka --------------------------------------------

def kcat_args(t: Target) -> list[str]:
    if shutil.which("kcat") is None:
        pytest.skip("Debian's kcat is not installed (make test-setup: apt-get install -y kcat)")
    return ["kcat", "-b", t.bootstrap, "-q", "-X", "security.protocol=SASL_SSL", "-X", f"sasl.mechanisms={t.mechanism}",
            "-X", f"sasl.username={USER}", "-X", f"sasl.password={PASSWORD}", "-X", f"ssl.ca.location={t.ca}",
            "-X", f"client.id={t.client_id}", "-X", "log_level=3"]


def kcat_round_trip(t: Target) -> list[bytes]:
    sent = values(COUNT, "kcat")
    produced = subprocess.run([*kcat_args(t), "-P", "-t", t.topic, "-p", "0"], input=b"\n".join(sent) + b"\n",
                              capture_output=True, timeout=60, check=False)
    assert produced.returncode == 0, produced.stderr.decode()
    got = subprocess.run([*kcat_args(t), "-G", t.group, t.topic, "-X", "auto.offset.reset=earliest",
                          "-X", f"session.timeout.ms={SESSION_MS}", "-X", f"heartbeat.interval.ms={HEARTBEAT_MS}",
                          "-c", str(COUNT), "-f", "%s\n"], capture_output=True, timeout=60, check=False)
    assert got.returncode == 0, got.stderr.decode()
    return got.stdout.splitlines()


def kcat_consume(t: Target, seconds: float) -> int:
    proc = subprocess.Popen([*kcat_args(t), "-C", "-t", t.topic, "-p", "0", "-o", "beginning", "-f", "%S\n"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, _ = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.terminate()  # our own child, by its handle
        out, _ = proc.communicate(timeout=30)
    return sum(int(line) for line in out.split() if line.strip().isdigit())


def librdkafka_config(t: Target) -> dict[str, Any]:
    return {"bootstrap.servers": t.bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": t.mechanism,
            "sasl.username": USER, "sasl.password": PASSWORD, "ssl.ca.location": t.ca, "client.id": t.client_id,
            "log_level": 0}


def confluent_round_trip(t: Target) -> list[bytes]:
    producer = Producer(librdkafka_config(t))
    sent = values(COUNT, "confluent")
    for value in sent:
        producer.produce(t.topic, value, partition=0)
    assert producer.flush(30) == 0
    return confluent_read(t, COUNT, 60.0, group=True)[1]


def confluent_read(t: Target, limit: float, seconds: float, *, group: bool) -> tuple[int, list[bytes]]:
    consumer = Consumer({**librdkafka_config(t), "group.id": t.group, "auto.offset.reset": "earliest",
                         "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS})
    if group:
        consumer.subscribe([t.topic])
    else:
        consumer.assign([TopicPartition(t.topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    size = 0
    deadline = time.monotonic() + seconds
    try:
        while len(got) < limit and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                value = message.value() or b""
                size += len(value)
                got.append(value if limit < float("inf") else b"")
    finally:
        consumer.close()
    return size, got


def confluent_consume(t: Target, seconds: float) -> int:
    return confluent_read(t, float("inf"), seconds, group=False)[0]


# -- kafka-python and aiokafka ------------------------------------------------------------------------------------

def kafka_python_config(t: Target) -> dict[str, Any]:
    return {"bootstrap_servers": t.bootstrap, "security_protocol": "SASL_SSL", "ssl_cafile": t.ca,
            "sasl_mechanism": t.mechanism, "sasl_plain_username": USER, "sasl_plain_password": PASSWORD,
            "client_id": t.client_id}


def kafka_python_round_trip(t: Target) -> list[bytes]:
    from kafka import KafkaProducer

    producer = KafkaProducer(**kafka_python_config(t))
    sent = values(COUNT, "kafka-python")
    try:
        for value in sent:
            producer.send(t.topic, value, partition=0)
        producer.flush(30)
    finally:
        producer.close(10)
    return kafka_python_read(t, COUNT, 60.0, group=True)[1]


def kafka_python_read(t: Target, limit: float, seconds: float, *, group: bool) -> tuple[int, list[bytes]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    if group:
        consumer = KafkaConsumer(t.topic, group_id=t.group, auto_offset_reset="earliest",
                                 session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                                 **kafka_python_config(t))
    else:
        consumer = KafkaConsumer(auto_offset_reset="earliest", **kafka_python_config(t))
        consumer.assign([KafkaTopicPartition(t.topic, 0)])
    got: list[bytes] = []
    size = 0
    deadline = time.monotonic() + seconds
    try:
        while len(got) < limit and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                for record in records:
                    size += len(record.value or b"")
                    got.append(record.value if limit < float("inf") else b"")
    finally:
        consumer.close()
    return size, got


def kafka_python_consume(t: Target, seconds: float) -> int:
    return kafka_python_read(t, float("inf"), seconds, group=False)[0]


def aiokafka_config(t: Target) -> dict[str, Any]:
    from aiokafka.helpers import create_ssl_context

    return {"bootstrap_servers": t.bootstrap, "security_protocol": "SASL_SSL",
            "ssl_context": create_ssl_context(cafile=t.ca), "sasl_mechanism": t.mechanism,
            "sasl_plain_username": USER, "sasl_plain_password": PASSWORD, "client_id": t.client_id}


async def _aiokafka_read(t: Target, limit: float, seconds: float, *, group: bool) -> tuple[int, list[bytes]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    if group:
        consumer = AIOKafkaConsumer(t.topic, group_id=t.group, auto_offset_reset="earliest",
                                    session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                                    **aiokafka_config(t))
        await consumer.start()
    else:
        consumer = AIOKafkaConsumer(auto_offset_reset="earliest", **aiokafka_config(t))
        await consumer.start()
        consumer.assign([AioTopicPartition(t.topic, 0)])
    got: list[bytes] = []
    size = 0
    deadline = time.monotonic() + seconds
    try:
        while len(got) < limit and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                for record in records:
                    size += len(record.value or b"")
                    got.append(record.value if limit < float("inf") else b"")
    finally:
        await consumer.stop()
    return size, got


def aiokafka_round_trip(t: Target) -> list[bytes]:
    from aiokafka import AIOKafkaProducer

    sent = values(COUNT, "aiokafka")

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**aiokafka_config(t))
        await producer.start()
        try:
            for value in sent:
                await producer.send_and_wait(t.topic, value, partition=0)
        finally:
            await producer.stop()
        return (await _aiokafka_read(t, COUNT, 60.0, group=True))[1]

    return asyncio.run(run())


def aiokafka_consume(t: Target, seconds: float) -> int:
    return asyncio.run(_aiokafka_read(t, float("inf"), seconds, group=False))[0]


# -- @platformatic/kafka (Node) -----------------------------------------------------------------------------------

def node(t: Target, **spec: Any) -> dict[str, Any]:
    if shutil.which("node") is None or not (ROOT / "node_modules" / "@platformatic" / "kafka").is_dir():
        pytest.skip("node or node_modules/@platformatic/kafka is not installed (make setup)")
    full = {"bootstrap": t.bootstrap, "ca": t.ca, "clientId": t.client_id, "groupId": t.group, "topic": t.topic,
            "sessionTimeout": SESSION_MS,
            "sasl": {"mechanism": t.mechanism, "username": USER, "password": PASSWORD}, **spec}
    done = subprocess.run(["node", str(NODE_SCRIPT), json.dumps(full)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def node_round_trip(t: Target) -> list[bytes]:
    return [v.encode() for v in node(t, mode="roundtrip", count=COUNT)["values"]]


def node_consume(t: Target, seconds: float) -> int:
    return int(node(t, mode="consume", seconds=seconds)["bytes"])


@dataclass(frozen=True)
class Client:
    mechanism: str
    round_trip: Callable[[Target], list[bytes]]
    consume: Callable[[Target, float], int]
    prefix: str


CLIENTS = {
    "kcat-plain": Client("PLAIN", kcat_round_trip, kcat_consume, "kcat"),
    "kcat-scram": Client("SCRAM-SHA-256", kcat_round_trip, kcat_consume, "kcat"),
    "confluent-kafka": Client("SCRAM-SHA-512", confluent_round_trip, confluent_consume, "confluent"),
    "kafka-python": Client("SCRAM-SHA-256", kafka_python_round_trip, kafka_python_consume, "kafka-python"),
    "aiokafka": Client("SCRAM-SHA-512", aiokafka_round_trip, aiokafka_consume, "aiokafka"),
    "platformatic-kafka": Client("SCRAM-SHA-256", node_round_trip, node_consume, "node"),
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", list(CLIENTS))
def test_a_real_client_round_trips_over_sasl_ssl_and_reads_its_quota_from_large_batches(
    name: str, tansu: Tansu, gateway_factory: GatewayFactory, pki: dict[str, str], large_batches: str
) -> None:
    client = CLIENTS[name]
    if name == "aiokafka":
        pytest.importorskip("aiokafka")
    gw = sasl_ssl_gateway(gateway_factory, pki, legacy_nonce=True)
    host, port = gw.thread.address("EXTERNAL")
    admin = Admin(open_store(gw.store_path))
    try:
        quota = {"consumer_byte_rate": float(Q)}
        assert admin.alter([Alteration.of(QuotaEntity(client_id=f"quota-{name}"), quota)])[0].ok
    finally:
        admin.close()
    target = Target(f"{host}:{port}", pki["ca"], client.mechanism, f"rt-{name}", new_topic(tansu.bootstrap))

    assert client.round_trip(target) == values(COUNT, client.prefix)

    time.sleep(0.5)  # the quota reaches the gateway within a store poll
    read = client.consume(replace(target, client_id=f"quota-{name}", topic=large_batches), QUOTA_S)
    report = f"{name}: read {read} bytes in {QUOTA_S:.0f} s under {Q} B/s = {read / QUOTA_S / Q:.2f} Q"
    print(report)
    # never starved; at most what Kafka's windowed rate allows a fresh consumer (one window at once, then Q)
    assert 0.3 * Q * QUOTA_S <= read <= Q * (QUOTA_S + 10) + 2_000_000, report


def test_kcat_scram_is_refused_without_the_legacy_setting_and_the_log_says_why(
    tansu: Tansu, gateway_factory: GatewayFactory, pki: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Debian's kcat (librdkafka 2.0.2) repeats its SCRAM nonce: refused by default (Kafka 4.x's rule), the cause
    logged once for its connection."""
    gw = sasl_ssl_gateway(gateway_factory, pki, legacy_nonce=False)
    host, port = gw.thread.address("EXTERNAL")
    target = Target(f"{host}:{port}", pki["ca"], "SCRAM-SHA-256", "kcat-strict", new_topic(tansu.bootstrap))
    with caplog.at_level(logging.WARNING, logger="quotaflow.gateway.auth.scram"):
        done = subprocess.run([*kcat_args(target), "-L", "-m", "5"], capture_output=True, timeout=30, check=False)
    assert done.returncode != 0, done.stdout.decode()  # no metadata: it never got past authentication
    causes = [r.getMessage() for r in caplog.records if "client repeated its nonce: librdkafka < 2.6.1" in
              r.getMessage()]
    assert causes, caplog.text
