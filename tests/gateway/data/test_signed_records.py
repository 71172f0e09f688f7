"""Signed records of quotaflow's own topics against a real broker (issue 22.8): records written straight to the
store topic and to ``__quotaflow_usage`` with confluent-kafka by someone without the fleet key are ignored and
counted; records signed with the key apply; key rotation; ``store copy`` re-signs with the destination's key."""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from quotaflow.admin.wire import WireAdmin
from quotaflow.cli.main import cli
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.filters import QuotaFilter
from quotaflow.gateway.auth.sasl import hash_password, verify_password
from quotaflow.gateway.data.cluster_quota import UsageExchange, encode_report
from quotaflow.store import open_store
from quotaflow.store.kafka import KafkaStore
from quotaflow.store.records import credential_record, credential_tombstones, quota_record
from quotaflow.store.signing import RecordSigner
from quotaflow.testing.tansu import Tansu

pytestmark = pytest.mark.broker

ALICE = QuotaEntity(user="alice")
K1 = "fleet-key-one-0123456789abcdef0123456789"
K2 = "fleet-key-two-0123456789abcdef0123456789"


def _keys(tmp_path: Path, *keys: str) -> Path:
    path = tmp_path / f"keys-{uuid.uuid4().hex[:6]}"
    path.write_text("".join(f"{k}\n" for k in keys))
    return path


def _url(tansu: Tansu, topic: str, keys: Path | None) -> str:
    url = f"kafka://{tansu.bootstrap}/{topic}"
    return url if keys is None else f"{url}?quotaflow.store.signing.key.file={keys}"


def _produce(tansu: Tansu, topic: str, records: list[tuple[bytes, bytes | None, list[tuple[str, bytes]] | None]]
             ) -> None:
    """Straight to the topic, as anyone with write access to it could (no quotaflow code involved)."""
    producer = Producer({"bootstrap.servers": tansu.bootstrap})
    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, partition=0, headers=headers)
    assert producer.flush(20) == 0


def _first_record(tansu: Tansu, topic: str) -> Message:
    """The topic's first record as any client reads it (key, value, headers)."""
    consumer = Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                return message
    finally:
        consumer.close()
    raise AssertionError(f"nothing to read in {topic}")


def _eventually(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_forged_store_records_are_ignored_and_signed_ones_apply(tansu: Tansu, tmp_path: Path) -> None:
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    keys = _keys(tmp_path, K1)
    admin = hash_password("admin", "admin-secret", iterations=1000)
    with KafkaStore(_url(tansu, topic, keys)) as store:
        assert store.signed
        store.alter([(ALICE, {"producer_byte_rate": 2000.0})])
        store.put_credential(admin)
        # bob can write the topic but has no key: his quota raised, admin's password replaced, then admin deleted
        bob_admin = hash_password("admin", "bobs-password", iterations=1000)
        _produce(tansu, topic, [(*quota_record(ALICE, {"producer_byte_rate": 2e9}, 1), None),
                                (*credential_record(bob_admin), None),
                                *((k, v, None) for k, v in credential_tombstones("admin")),
                                # a signature made up without the key
                                (*quota_record(ALICE, {"producer_byte_rate": 3e9}, 2),
                                 [("quotaflow.signature", b"\0" * 32), ("quotaflow.timestamp", b"\0" * 8)])])
        _eventually(lambda: store.rejected_records >= 6)
        assert store.get(ALICE) == {"producer_byte_rate": 2000.0}
        credential = store.get_credential("admin")
        assert credential is not None and verify_password(credential, "admin-secret")
        assert not verify_password(credential, "bobs-password")
        samples = list(store.metric_samples(0))
        assert [(s.name, s.value) for s in samples] == [("rejected-records", 6.0)]
        # a signed write still applies after all that
        store.alter([(ALICE, {"producer_byte_rate": 4000.0})])
        assert store.get(ALICE) == {"producer_byte_rate": 4000.0}
    # a new reader (a restarted gateway) builds the same view from the log
    with KafkaStore(_url(tansu, topic, keys)) as again:
        assert again.get(ALICE) == {"producer_byte_rate": 4000.0} and again.rejected_records == 6
    # and without a key (today's behaviour) the forgeries would have applied: that is the risk signing removes
    with KafkaStore(_url(tansu, topic, None)) as unsigned:
        assert unsigned.get(ALICE) == {"producer_byte_rate": 4000.0}  # the last record wins either way ...
        assert unsigned.get_credential("admin") is None  # ... but bob's tombstone deleted the admin here


def test_a_replayed_signed_record_is_refused(tansu: Tansu, tmp_path: Path) -> None:
    """A validly signed record copied from the topic and written again after a later change (an hour later, by a
    writer's clock) does not bring the old value back."""
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    keys = _keys(tmp_path, K1)
    now = [time.time_ns() // 1_000_000]
    with KafkaStore(_url(tansu, topic, keys), clock_ms=lambda: now[0]) as store:
        store.alter([(ALICE, {"producer_byte_rate": 9e9})])
        old = _first_record(tansu, topic)
        assert old.headers()
        now[0] += 3_600_000
        store.alter([(ALICE, {"producer_byte_rate": 1000.0})])
        _produce(tansu, topic, [(old.key(), old.value(), old.headers())])
        _eventually(lambda: store.rejected_records == 1)
        assert store.get(ALICE) == {"producer_byte_rate": 1000.0}


def test_key_rotation(tansu: Tansu, tmp_path: Path) -> None:
    """Step 1: every reader gets [K1, K2]; records signed with K1 or K2 apply. Step 2: writers sign with K2 first.
    Step 3: K1 removed: K2's records apply, a record signed with K1 alone no longer does."""
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    with KafkaStore(_url(tansu, topic, _keys(tmp_path, K1))) as before:
        before.alter([(ALICE, {"producer_byte_rate": 1000.0})])
    with KafkaStore(_url(tansu, topic, _keys(tmp_path, K1, K2))) as step1:
        assert step1.get(ALICE) == {"producer_byte_rate": 1000.0}
        with KafkaStore(_url(tansu, topic, _keys(tmp_path, K2, K1))) as step2:
            step2.alter([(QuotaEntity(user="bob"), {"consumer_byte_rate": 500.0})])
            _eventually(lambda: step1.get(QuotaEntity(user="bob")) == {"consumer_byte_rate": 500.0})
            assert step1.rejected_records == 0
    with KafkaStore(_url(tansu, topic, _keys(tmp_path, K2))) as step3:
        assert step3.get(QuotaEntity(user="bob")) == {"consumer_byte_rate": 500.0}
        assert step3.get(ALICE) == {} and step3.rejected_records == 1  # K1's record: re-sign it (store copy)


def test_store_copy_re_signs_with_the_destination_key(tansu: Tansu, tmp_path: Path) -> None:
    src_topic, dst_topic = f"quotas-{uuid.uuid4().hex[:8]}", f"quotas-{uuid.uuid4().hex[:8]}"
    with KafkaStore(_url(tansu, src_topic, _keys(tmp_path, K1))) as src:
        src.alter([(ALICE, {"producer_byte_rate": 1000.0})])
        src.put_credential(hash_password("dave", "pw-d", iterations=1000))
    result = CliRunner().invoke(cli, ["store", "copy", _url(tansu, src_topic, _keys(tmp_path, K1)),
                                      _url(tansu, dst_topic, _keys(tmp_path, K2))])
    assert result.exit_code == 0, result.output
    with open_store(_url(tansu, dst_topic, _keys(tmp_path, K2))) as dst:
        assert dst.get(ALICE) == {"producer_byte_rate": 1000.0} and dst.rejected_records == 0
        assert dst.get_credential("dave") is not None
    with open_store(_url(tansu, dst_topic, _keys(tmp_path, K1))) as wrong_key:
        assert wrong_key.get(ALICE) == {} and wrong_key.rejected_records == 2


def test_forged_and_replayed_usage_reports_are_ignored(tansu: Tansu, tmp_path: Path) -> None:
    """``__quotaflow_usage``: a report claiming huge usage written without the key would shrink every gateway's
    share; a peer's old report written again would bring back stale usage. Neither counts."""
    topic = f"usage-{uuid.uuid4().hex[:8]}"
    signer = RecordSigner.from_file(_keys(tmp_path, K1))
    writer = UsageExchange(tansu.bootstrap, topic, signer)
    reader = UsageExchange(tansu.bootstrap, topic, signer)
    writer.start()
    reader.start()
    try:
        # the reader starts at the end of the topic, resolved on its first poll: publish until it sees one, as a
        # gateway publishes every window
        deadline = time.monotonic() + 30
        while not reader.take():
            assert time.monotonic() < deadline
            writer.publish("gw-a", encode_report("gw-a", 1000, {"broker-1": {}}))
            time.sleep(0.3)
        forged = encode_report("gw-evil", 1000, {"broker-1": {}})
        _produce(tansu, topic, [(b"gw-evil", forged, None)])
        # gw-a's signed report, copied and written again
        first = _first_record(tansu, topic)
        assert first.key() == b"gw-a"
        time.sleep(0.5)
        reader.take()  # gw-a's later reports, if any were still on their way
        _produce(tansu, topic, [(first.key(), first.value(), first.headers())])
        _eventually(lambda: reader.rejected == 2)
        assert reader.take() == []
        writer.publish("gw-a", encode_report("gw-a", 1000, {"broker-1": {}}))  # the next window's report counts
        _eventually(lambda: bool(reader.take()))
        assert reader.rejected == 2
    finally:
        writer.close()
        reader.close()


def test_the_gateway_counts_refused_store_records_in_metrics(tansu: Tansu, tmp_path: Path) -> None:
    from quotaflow.gateway.server import GatewayThread

    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    url = _url(tansu, topic, _keys(tmp_path, K1))
    with KafkaStore(url) as store:
        store.alter([(ALICE, {"producer_byte_rate": 2000.0})])
    with GatewayThread(tansu.bootstrap, {"PLAINTEXT": "127.0.0.1:0"}, url, metrics_port=0) as gw:
        assert gw.gateway.metrics_address is not None
        host, port = gw.gateway.metrics_address
        _produce(tansu, topic, [(*quota_record(ALICE, {"producer_byte_rate": 2e9}, 1), None)])

        def rejected() -> float:
            with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
                text = response.read().decode()
            found = re.search(rf'^kafka_server_quota_store_rejected_records{{topic="{topic}"}} (\S+)$', text, re.M)
            return float(found.group(1)) if found else -1.0

        _eventually(lambda: rejected() == 1.0)
        wire = WireAdmin(gw.bootstrap())
        try:
            assert {d.entity: d.values for d in wire.describe(QuotaFilter())} == {
                ALICE: {"producer_byte_rate": 2000.0}}
        finally:
            wire.close()


def test_the_gateway_warns_at_startup_about_an_unsigned_store(tansu: Tansu, tmp_path: Path) -> None:
    from quotaflow.testing.gateway_process import GatewayProcess

    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    with GatewayProcess(tansu.bootstrap, _url(tansu, topic, None), tmp_path / "unsigned") as gw:
        assert "records are not signed (quotaflow.store.signing.key.file is not set)" in gw.log_path.read_text()
    with GatewayProcess(tansu.bootstrap, _url(tansu, topic + "-s", _keys(tmp_path, K1)), tmp_path / "signed") as gw:
        assert "not signed" not in gw.log_path.read_text()


def test_two_signing_gateways_share_usage_and_ignore_a_forged_report(tansu: Tansu, tmp_path: Path) -> None:
    """``quotaflow.quota.scope=cluster`` with signed reports between two gateway processes: each counts the other
    (their reports verify with the shared key), and a forged report written straight to the usage topic is refused
    by both."""
    from contextlib import ExitStack

    from confluent_kafka.admin import AdminClient, NewTopic

    from quotaflow.testing.gateway_process import GatewayProcess

    keys = _keys(tmp_path, K1)
    topic, usage = f"t-{uuid.uuid4().hex[:8]}", f"usage-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})  # kept alive until the topic exists
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    store = _url(tansu, f"quotas-{topic}", keys)
    with KafkaStore(store) as s:
        s.alter([(QuotaEntity(client_id="shared"), {"producer_byte_rate": 1e6})])
    config = tmp_path / "gateway.properties"
    config.write_text(f"quota.window.size.seconds=1\nquota.window.num=3\nquotaflow.quota.cluster.expiry.windows=3\n"
                      f"quotaflow.quota.scope=cluster\nquotaflow.quota.cluster.usage.topic={usage}\n"
                      f"quotaflow.quota.cluster.signing.key.file={keys}\n")

    def metric(gw: GatewayProcess, name: str) -> float:
        with urllib.request.urlopen(f"{gw.http_url}/metrics", timeout=10) as response:
            found = re.search(rf"^{name} (\S+)$", response.read().decode(), re.M)
        return float(found.group(1)) if found else -1.0

    with ExitStack() as stack:
        gateways = [stack.enter_context(GatewayProcess(tansu.bootstrap, store, tmp_path / name, metrics=True,
                                                       extra_args=("--config", str(config))))
                    for name in ("a", "b")]
        for gw in gateways:
            assert "reports are not signed" not in gw.log_path.read_text()
        deadline = time.monotonic() + 60
        while not all(metric(gw, "kafka_server_cluster_quota_live_participants") >= 2 for gw in gateways):
            assert time.monotonic() < deadline, [gw.log_path.read_text()[-1500:] for gw in gateways]
            for gw in gateways:  # traffic under the quota: each gateway has a participant to report
                producer = Producer({"bootstrap.servers": gw.bootstrap, "client.id": "shared"})
                producer.produce(topic, b"x" * 100)
                producer.flush(10)
            time.sleep(0.5)
        assert all(metric(gw, "kafka_server_cluster_quota_rejected_reports") == 0 for gw in gateways)
        forged = encode_report("evil", 1000, {"broker-1": {}})
        _produce(tansu, usage, [(b"evil", forged, None)])
        _eventually(lambda: all(metric(gw, "kafka_server_cluster_quota_rejected_reports") == 1 for gw in gateways))
