"""A CLI reads only what it needs from a ``kafka://`` store (issue 37.3): writers add a checkpoint (the state in a
few chunk records, then a manifest naming them) whenever the log has grown by ``CHECKPOINT_INTERVAL`` records, and
a command's reader starts from the newest one instead of offset 0. Counted in records read, not in time."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

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
from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.store import kafka as kafka_store
from quotaflow.store import records
from quotaflow.store.kafka import KafkaStore
from quotaflow.testing.tansu import Tansu

pytestmark = pytest.mark.broker

INTERVAL = 300
KEY = "fleet-key-one-0123456789abcdef0123456789"


def _acl(i: int) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, f"t{i}", PatternType.LITERAL),
                      AccessControlEntry(f"User:u{i}", "*", AclOperation.READ, AclPermissionType.ALLOW))


def _caught_up(store: KafkaStore, position: int) -> None:
    """Opening catches up to the end offset the broker reports; tansu (memory storage) can report one behind the
    last record written, so the background reader may need another poll for the rest."""
    deadline = time.monotonic() + 30
    while store.last_seq() < position:
        assert time.monotonic() < deadline, (store.last_seq(), position)
        time.sleep(0.05)
    assert store.last_seq() == position


@pytest.fixture(autouse=True)
def _small(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same rules at a size a test writes in seconds (several chunks, several intervals)."""
    monkeypatch.setattr(kafka_store, "CHECKPOINT_INTERVAL", INTERVAL)
    monkeypatch.setattr(records, "CHUNK_RECORDS", 100)


@pytest.mark.parametrize("signed", [False, True])
def test_a_cli_reader_starts_from_the_checkpoint_and_reads_fewer_records(tansu: Tansu, tmp_path: Path,
                                                                          signed: bool) -> None:
    url = f"kafka://{tansu.bootstrap}/quotas-{uuid.uuid4().hex[:8]}"
    if signed:
        (tmp_path / "k").write_text(KEY + "\n")
        url += f"?quotaflow.store.signing.key.file={tmp_path / 'k'}"
    alice = QuotaEntity(user="alice")
    with KafkaStore(url) as writer:
        for start in range(0, 1_000, 250):
            writer.add_acls([_acl(i) for i in range(start, start + 250)])
        writer.remove_acls([_acl(0)])
        writer.alter([(alice, {"producer_byte_rate": 1000.0})])
        writer.put_credential(hash_password("admin", "secret", iterations=1000))
        writer.alter([(alice, {"consumer_byte_rate": 2000.0})])  # after the last checkpoint: the tail
        total = writer.last_seq()
    with KafkaStore(url) as full, KafkaStore(url, from_checkpoint=True) as cli:
        _caught_up(full, total)
        _caught_up(cli, total)
        assert cli.acls() == full.acls() and len(cli.acls().bindings) == 999
        assert cli.snapshot().entities == full.snapshot().entities == {
            alice: {"producer_byte_rate": 1000.0, "consumer_byte_rate": 2000.0}}
        assert cli.get_credential("admin") == full.get_credential("admin") is not None
        assert cli.last_seq() == full.last_seq() == total
        assert full.records_read == total  # a gateway reads the whole log (its change log starts at 0) ...
        assert cli.records_read < total / 2, (cli.records_read, total)  # ... a command far less
        assert cli.rejected_records == 0 and full.rejected_records == 0
        # the command's reader follows the log from there, as every reader does
        cli.add_acls([_acl(5_000)])
        assert _acl(5_000) in cli.acls().bindings


def test_a_reader_without_a_usable_checkpoint_reads_from_the_beginning(tansu: Tansu, tmp_path: Path) -> None:
    """A replayed (signed) manifest copied from an older checkpoint is refused like any replay: the reader falls
    back to the newest one that verifies, or to offset 0, and still builds the right state."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    (tmp_path / "k").write_text(KEY + "\n")
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    url = f"kafka://{tansu.bootstrap}/{topic}?quotaflow.store.signing.key.file={tmp_path / 'k'}"
    with KafkaStore(url) as writer:
        writer.add_acls([_acl(i) for i in range(INTERVAL + 10)])  # one checkpoint with every grant in it
        writer.remove_acls([_acl(i) for i in range(INTERVAL + 10)])  # another: no grant at all
        total = writer.last_seq()
    consumer = Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    manifests = []
    while len(manifests) < 2:
        message = consumer.poll(5)
        assert message is not None
        if message.error() is None and message.key() == records.MANIFEST_KEY:
            manifests.append(message)
    consumer.close()
    producer = Producer({"bootstrap.servers": tansu.bootstrap})
    old = manifests[0]
    producer.produce(topic, key=old.key(), value=old.value(), partition=0, headers=old.headers())
    assert producer.flush(20) == 0
    with KafkaStore(url, from_checkpoint=True) as cli:
        _caught_up(cli, total + 1)
        assert cli.acls().bindings == frozenset()  # the grants of the older checkpoint did not come back


def test_without_a_checkpoint_what_was_read_back_is_applied_once(tansu: Tansu,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A log longer than the interval with no checkpoint (written by a quotaflow that wrote none): the reader reads
    back to offset 0, applies that, and reads no record twice."""
    url = f"kafka://{tansu.bootstrap}/quotas-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(kafka_store, "CHECKPOINT_INTERVAL", 10**9)
    with KafkaStore(url) as writer:
        writer.add_acls([_acl(i) for i in range(2 * INTERVAL)])
        total = writer.last_seq()
    monkeypatch.setattr(kafka_store, "CHECKPOINT_INTERVAL", INTERVAL)
    with KafkaStore(url, from_checkpoint=True) as cli:
        _caught_up(cli, total)
        assert len(cli.acls().bindings) == 2 * INTERVAL
        assert cli.records_read == total


def test_the_cli_describes_from_the_checkpoint(tansu: Tansu, monkeypatch: pytest.MonkeyPatch) -> None:
    """``quotaflow acls --list`` and ``configs --describe`` open the store from its checkpoint (counted through the
    store the CLI opened) and print what a reader of the whole log holds."""
    from click.testing import CliRunner

    from quotaflow.cli.main import cli

    url = f"kafka://{tansu.bootstrap}/quotas-{uuid.uuid4().hex[:8]}"
    with KafkaStore(url) as writer:
        writer.add_acls([_acl(i) for i in range(3 * INTERVAL)])
        writer.alter([(QuotaEntity(user="alice"), {"producer_byte_rate": 1000.0})])
        total = writer.last_seq()
    opened: list[KafkaStore] = []
    real_init = KafkaStore.__init__

    def spy(self: KafkaStore, *args: object, **kwargs: object) -> None:
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]
        opened.append(self)

    monkeypatch.setattr(KafkaStore, "__init__", spy)
    listed = CliRunner().invoke(cli, ["acls", "--list", "--topic", "t7", "--store", url])
    assert listed.exit_code == 0, listed.output
    assert "principal=User:u7" in listed.output and "User:u8" not in listed.output
    described = CliRunner().invoke(cli, ["configs", "--describe", "--entity-type", "users", "--entity-name",
                                         "alice", "--store", url])
    assert described.exit_code == 0, described.output
    assert "producer_byte_rate=1000.0" in described.output
    assert len(opened) == 2 and all(0 < store.records_read < total / 2 for store in opened), [
        store.records_read for store in opened]
