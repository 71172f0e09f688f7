"""Signed store records are never replayable (issue 34.5), against a real broker: a principal with WRITE on the
store topic (and no fleet key) copies records it read and appends them again with confluent-kafka: a quota
immediately, after a newer one, and on a quiet store with the writers' clock moved well past the old 5-minute
window; an ACL grant and a credential after their delete. No reader, live or started afterwards, applies any copy.
Each of these applied on the time-window guard that came before."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from quotaflow.core.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from quotaflow.core.entities import QuotaEntity
from quotaflow.gateway.auth.sasl import hash_password, verify_password
from quotaflow.store.kafka import KafkaStore
from quotaflow.testing.tansu import Tansu

pytestmark = pytest.mark.broker

ALICE = QuotaEntity(user="alice")
KEY = "fleet-key-one-0123456789abcdef0123456789"
Raw = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]
GRANT = AclBinding(ResourcePattern(ResourceType.TOPIC, "*", PatternType.LITERAL),
                   AccessControlEntry("User:bob", "*", AclOperation.ALL, AclPermissionType.ALLOW))


def _url(tansu: Tansu, topic: str, tmp_path: Path) -> str:
    keys = tmp_path / "fleet.key"
    keys.write_text(KEY + "\n")
    return f"kafka://{tansu.bootstrap}/{topic}?quotaflow.store.signing.key.file={keys}"


def _read_all(tansu: Tansu, topic: str, count: int) -> list[Raw]:
    """The topic's first ``count`` records as any client with READ on it sees them (key, value, headers)."""
    consumer = Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": f"thief-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[Raw] = []
    try:
        deadline = time.monotonic() + 30
        while len(out) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                out.append((message.key(), message.value(), list(message.headers() or [])))
    finally:
        consumer.close()
    assert len(out) == count, out
    return out


def _append(tansu: Tansu, topic: str, records: list[Raw]) -> None:
    """Straight to the topic with confluent-kafka, as a principal with WRITE on it could."""
    producer = Producer({"bootstrap.servers": tansu.bootstrap})
    for key, value, headers in records:
        producer.produce(topic, key=key, value=value, partition=0, headers=headers)
    assert producer.flush(20) == 0


def _eventually(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_replayed_quota_never_applies(tansu: Tansu, tmp_path: Path) -> None:
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    url = _url(tansu, topic, tmp_path)
    now = [time.time_ns() // 1_000_000]
    with KafkaStore(url, clock_ms=lambda: now[0]) as store:
        store.alter([(ALICE, {"producer_byte_rate": 9e9})])
        high = _read_all(tansu, topic, 1)[0]
        _append(tansu, topic, [high])  # (a) immediately
        _eventually(lambda: store.rejected_records == 1)
        store.alter([(ALICE, {"producer_byte_rate": 1000.0})])
        now[0] += 1
        _append(tansu, topic, [high])  # (b) after a newer one
        _eventually(lambda: store.rejected_records == 2)
        assert store.get(ALICE) == {"producer_byte_rate": 1000.0}
        # (d) a quiet store: no write for 344 s by the writers' clock (injected, nobody sleeps); the old guard
        # measured its window from the newest record read, so on a quiet store every record stayed replayable
        now[0] += 344_000
        _append(tansu, topic, [high])
        _eventually(lambda: store.rejected_records == 3)
        assert store.get(ALICE) == {"producer_byte_rate": 1000.0}
        assert [c.value for c in store.changes_since(0)] == [9e9, 1000.0]
        # a signed write after all that lands and applies (its offset predicted past the copies)
        now[0] += 1
        store.alter([(ALICE, {"producer_byte_rate": 2000.0})])
        assert store.get(ALICE) == {"producer_byte_rate": 2000.0}
    # a restarted reader derives the same from the topic alone
    with KafkaStore(url) as again:
        assert again.get(ALICE) == {"producer_byte_rate": 2000.0} and again.rejected_records == 3


def test_a_replayed_acl_grant_or_credential_after_its_delete_never_applies(tansu: Tansu, tmp_path: Path) -> None:
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    url = _url(tansu, topic, tmp_path)
    old = hash_password("admin", "old-secret", iterations=1000)
    new = hash_password("admin", "new-secret", iterations=1000)
    with KafkaStore(url) as store:
        store.add_acls([GRANT])
        store.put_credential(old)
        grant, old_credential = _read_all(tansu, topic, 2)
        store.remove_acls([GRANT])
        assert store.delete_credential("admin")
        _append(tansu, topic, [grant, old_credential])  # (c) after the delete: no resurrection
        _eventually(lambda: store.rejected_records == 2)
        assert store.acls().bindings == frozenset() and store.get_credential("admin") is None
        store.put_credential(new)  # the admin created again, with another password
        _append(tansu, topic, [old_credential])
        _eventually(lambda: store.rejected_records == 3)
        credential = store.get_credential("admin")
        assert credential is not None and verify_password(credential, "new-secret")
        assert not verify_password(credential, "old-secret")
    with KafkaStore(url) as again:
        assert again.acls().bindings == frozenset()
        credential = again.get_credential("admin")
        assert credential is not None and verify_password(credential, "new-secret")


def test_writers_racing_for_offsets_re_sign_and_every_write_applies(tansu: Tansu, tmp_path: Path) -> None:
    """Two stores (two gateways) write at once: a record that lost the race for its predicted offset is refused
    by every reader, and its writer signs it again for a later offset, so every acknowledged write applies."""
    import threading

    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    url = _url(tansu, topic, tmp_path)
    with KafkaStore(url) as a, KafkaStore(url) as b:
        def writes(store: KafkaStore, user: str) -> None:
            for i in range(20):
                store.alter([(QuotaEntity(user=user), {"producer_byte_rate": float(1000 + i)})])

        threads = [threading.Thread(target=writes, args=(a, "a")), threading.Thread(target=writes, args=(b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        _eventually(lambda: a.last_seq() == b.last_seq())
        for store in (a, b):
            assert store.get(QuotaEntity(user="a")) == {"producer_byte_rate": 1019.0}
            assert store.get(QuotaEntity(user="b")) == {"producer_byte_rate": 1019.0}
            assert len(store.changes_since(0)) == 40  # every write applied once; the lost races were re-sent
