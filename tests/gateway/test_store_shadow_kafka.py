"""Shadow sets and promotions in the ``kafka://`` store, against a real broker (tansu): the shared contract
(``tests/shadow_contract.py``) on a signed topic, a promotion as ONE record, a copied (replayed) shadow record
refused by every reader, the shadow history in checkpoints, and a proposal too large for one record refused before
anything is written."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import shadow_contract as contract
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.errors import StoreError
from quotaflow.store import kafka as kafka_store
from quotaflow.store import records
from quotaflow.store.kafka import KafkaStore
from quotaflow.testing.tansu import Tansu

pytestmark = pytest.mark.broker

KEY = "fleet-key-one-0123456789abcdef0123456789"
Raw = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]


@pytest.fixture
def url(tansu: Tansu, tmp_path: Path) -> str:
    keys = tmp_path / "fleet.key"
    keys.write_text(KEY + "\n")
    return f"kafka://{tansu.bootstrap}/quotas-{uuid.uuid4().hex[:8]}?quotaflow.store.signing.key.file={keys}"


@pytest.fixture
def store(url: str) -> Iterator[KafkaStore]:
    with KafkaStore(url) as s:
        yield s


def test_start_status_stop_replace(store: KafkaStore, url: str) -> None:
    contract.start_status_stop_replace(store, lambda: KafkaStore(url))


def test_promote_and_rollback(store: KafkaStore, url: str) -> None:
    contract.promote_and_rollback(store, lambda: KafkaStore(url), one_seq=True)


def test_rollbacks_walk_back_and_force(store: KafkaStore) -> None:
    contract.rollbacks_walk_back_and_force(store)


def test_promotion_is_atomic_to_pollers(store: KafkaStore, url: str) -> None:
    contract.promotion_is_atomic_to_pollers(store, lambda: KafkaStore(url))


def test_racing_writers(store: KafkaStore, url: str) -> None:
    contract.racing_writers(store, lambda: KafkaStore(url))


def test_unsigned_store_too(tansu: Tansu) -> None:
    url = f"kafka://{tansu.bootstrap}/quotas-{uuid.uuid4().hex[:8]}"
    with KafkaStore(url) as store:
        contract.promote_and_rollback(store, lambda: KafkaStore(url), one_seq=True)


def test_a_promotion_is_one_record(store: KafkaStore) -> None:
    contract._seed(store)
    store.start_shadow("p", "ann", contract.PROPOSAL)
    position = store.last_seq()
    promotion = store.promote_shadow("ann", 5)
    assert store.last_seq() == position + 1  # one offset (no checkpoint is due this early)
    assert promotion.id == promotion.first_seq == promotion.last_seq == position + 1
    changes = store.changes_since(position)
    assert len(changes) == 5 and {c.seq for c in changes} == {position + 1}


def _read_all(tansu: Tansu, topic: str, count: int) -> list[Raw]:
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


def _append(tansu: Tansu, topic: str, raw: list[Raw]) -> None:
    """Straight to the topic with confluent-kafka, as a principal with WRITE on it (and no fleet key) could."""
    producer = Producer({"bootstrap.servers": tansu.bootstrap})
    for key, value, headers in raw:
        producer.produce(topic, key=key, value=value, partition=0, headers=headers)
    assert producer.flush(20) == 0


def test_a_replayed_shadow_record_never_applies(tansu: Tansu, url: str) -> None:
    """Someone who can write the topic copies the signed start and promote records of a proposal that was rolled
    back, and appends them again: were they applied, the rolled-back quotas would be enforced again. Every reader,
    live or started afterwards, refuses both (each was signed for another offset)."""
    topic = url.split("/")[3].split("?")[0]
    alice = QuotaEntity(user="alice")
    with KafkaStore(url) as store:
        store.alter([(alice, {"producer_byte_rate": 1000.0})])
        store.start_shadow("generous", "ann", [(alice, {"producer_byte_rate": 9e9})])
        store.promote_shadow("ann", 0)
        store.rollback("ann", 0)
        _seed, start, promote, _rollback = _read_all(tansu, topic, 4)
        assert b"shadow" in (start[0] or b"") and b"promote" in (promote[1] or b"")
        version = store.shadow_version()
        _append(tansu, topic, [start, promote])
        contract._wait(lambda: store.rejected_records == 2)
        assert store.get(alice) == {"producer_byte_rate": 1000.0}
        assert store.shadow() is None and store.shadow_version() == version and len(store.promotions()) == 2
        assert [s.outcome for s in store.shadow_sets()] == ["promoted"]
    with KafkaStore(url) as again:
        assert again.get(alice) == {"producer_byte_rate": 1000.0} and again.rejected_records == 2
        assert again.shadow() is None and len(again.promotions()) == 2 and len(again.shadow_sets()) == 1


def test_unsigned_a_replayed_promote_of_an_ended_set_changes_nothing(tansu: Tansu) -> None:
    """Without a key anyone may write the topic, but a promote record written again names a set that no longer
    runs: every reader skips it (the decision reads only shadow records, which are never compacted)."""
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    alice = QuotaEntity(user="alice")
    with KafkaStore(f"kafka://{tansu.bootstrap}/{topic}") as store:
        store.alter([(alice, {"producer_byte_rate": 1000.0})])
        store.start_shadow("generous", "ann", [(alice, {"producer_byte_rate": 9e9})])
        store.promote_shadow("ann", 0)
        store.rollback("ann", 0)
        promote = _read_all(tansu, topic, 3)[2]
        position = store.last_seq()
        _append(tansu, topic, [promote])
        contract._wait(lambda: store.last_seq() > position)
        assert store.get(alice) == {"producer_byte_rate": 1000.0} and len(store.promotions()) == 2


def test_the_shadow_history_is_in_checkpoints(tansu: Tansu, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command opening the store from its newest checkpoint has the running set, every ended one and every
    promotion, and the shadow version, as a reader of the whole log has."""
    monkeypatch.setattr(kafka_store, "CHECKPOINT_INTERVAL", 50)
    monkeypatch.setattr(kafka_store, "SCAN_RECORDS", 16)
    monkeypatch.setattr(records, "CHUNK_BYTES", 2_000)  # the history across several chunks
    alice = QuotaEntity(user="alice")
    with KafkaStore(url) as writer:
        contract._seed(writer)
        writer.start_shadow("one", "ann", contract.PROPOSAL)
        writer.promote_shadow("ann", 11)
        writer.start_shadow("two", "bob", [(alice, {"request_percentage": 5.0})])
        writer.stop_shadow("bob")
        writer.rollback("carl", 12)
        running = writer.start_shadow("three", "dora", contract.PROPOSAL)
        for i in range(200):  # the log grows past the interval: checkpoints follow
            writer.alter([(QuotaEntity(user="u"), {"producer_byte_rate": float(i + 1)})])
        total = writer.last_seq()
    with KafkaStore(url) as full, KafkaStore(url, from_checkpoint=True) as cli:
        contract._wait(lambda: full.last_seq() == total and cli.last_seq() == total)
        assert cli.records_read < total / 2, (cli.records_read, total)  # it did start from a checkpoint
        assert cli.shadow() == full.shadow() == running
        assert cli.shadow_sets() == full.shadow_sets() and len(cli.shadow_sets()) == 3
        assert [s.outcome for s in cli.shadow_sets()] == ["promoted", "stopped", "running"]
        assert cli.promotions() == full.promotions() and [p.kind for p in cli.promotions()] == ["promote",
                                                                                               "rollback"]
        assert cli.shadow_version() == full.shadow_version() == running.id
        assert cli.snapshot().entities == full.snapshot().entities
        cli.promote_shadow("dora", 13)  # the command acts on that state
        contract._wait(lambda: full.shadow() is None)
        assert full.promotions() == cli.promotions() and len(full.promotions()) == 3


def test_a_shadow_set_too_large_for_one_record_is_refused(store: KafkaStore, monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Its promotion must be one record: a set whose promotion would not fit is refused at start, with what to do,
    before anything is written; so is a promotion grown past the limit by the enforced values it replaces."""
    monkeypatch.setattr(kafka_store, "MAX_RECORD_BYTES", 2_000)
    proposal = [(QuotaEntity(user=f"tenant-{i:04d}"), {"producer_byte_rate": 1e6}) for i in range(60)]
    position = store.last_seq()
    with pytest.raises(StoreError, match=r"too large for one record: its promotion takes \d+ bytes, more than the "
                                         r"2000 .*split the proposal into smaller shadow sets"):
        store.start_shadow("huge", "ann", proposal)
    assert store.last_seq() == position and store.shadow() is None
    small = proposal[:12]
    store.start_shadow("fits", "ann", small)
    store.alter([(entity, {"producer_byte_rate": 5.0, "consumer_byte_rate": 6.0, "request_percentage": 7.0})
                 for entity, _ in small])  # the values the promotion would replace grow
    monkeypatch.setattr(kafka_store, "MAX_RECORD_BYTES", 1_200)
    position = store.last_seq()
    with pytest.raises(StoreError, match="too large for one record: its promotion takes"):
        store.promote_shadow("ann", 0)
    assert store.last_seq() == position and store.shadow() is not None


def test_the_cli_on_a_kafka_store(url: str, tmp_path: Path) -> None:
    """``quotaflow shadow`` against ``kafka://``: a reader following the topic (as a gateway does) sees the set,
    then the whole promotion at one seq with its effective time."""
    from click.testing import CliRunner

    from quotaflow.cli.main import cli

    proposal = tmp_path / "p.json"
    proposal.write_text('[{"entity": {"user": "alice"}, "values": {"producer_byte_rate": 2000}},'
                        ' {"entity": {"client-id-prefix": "etl-"}, "values": {"request_percentage": 20}}]')
    with KafkaStore(url) as gateway:
        result = CliRunner().invoke(cli, ["shadow", "start", "--from-file", str(proposal), "--name", "k", "--by",
                                          "ann", "--store", url])
        assert result.exit_code == 0, result.output
        contract._wait(lambda: gateway.shadow() is not None)
        assert gateway.shadow().name == "k"  # type: ignore[union-attr]
        seq = gateway.last_seq()
        result = CliRunner().invoke(cli, ["shadow", "promote", "--in", "3", "--store", url])
        assert result.exit_code == 0 and "Promoted shadow set" in result.stdout, result.output
        contract._wait(lambda: gateway.promotions() != [])
        (promotion,) = gateway.promotions()
        assert promotion.effective_ms - promotion.at_ms <= 3000
        changes = gateway.changes_since(seq)
        assert len(changes) == 2 and {c.seq for c in changes} == {promotion.first_seq}
        result = CliRunner().invoke(cli, ["shadow", "history", "--output", "json", "--store", url])
        assert result.exit_code == 0 and '"kind": "promote"' in result.stdout


def test_the_gateways_readers_take_a_whole_promotion(store: KafkaStore, url: str) -> None:
    """The change log's readers in a gateway (resolve's index, the connection-quota reloader) get every change of
    a promotion, though all share one seq (the index once kept only the first change of a seq)."""
    import asyncio

    from quotaflow.admin import Admin
    from quotaflow.engine.connection import ConnectionQuotas
    from quotaflow.gateway.listener import ConnectionQuotaReloader

    with KafkaStore(url) as gateway:
        admin = Admin(gateway)
        admin.follow(gateway.snapshot())
        quotas = ConnectionQuotas()
        reloader = ConnectionQuotaReloader(quotas, store=gateway)
        asyncio.run(reloader.poll_once())
        seq = gateway.last_seq()
        store.start_shadow("p", "ann", [(QuotaEntity(ip="10.0.0.1"), {"connection_creation_rate": 3.0}),
                                        (QuotaEntity(ip="10.0.0.2"), {"connection_creation_rate": 4.0}),
                                        (QuotaEntity(user="u1"), {"producer_byte_rate": 100.0}),
                                        (QuotaEntity(user="u2"), {"producer_byte_rate": 200.0})])
        store.promote_shadow("ann", 0)
        contract._wait(lambda: gateway.promotions() != [])
        changes = gateway.changes_since(seq)
        assert len(changes) == 4 and len({c.seq for c in changes}) == 1
        admin.apply_changes(changes)
        asyncio.run(reloader.apply_store_changes(changes))
        assert admin.resolve("u1", "c").quotas["producer_byte_rate"].value == 100.0
        assert admin.resolve("u2", "c").quotas["producer_byte_rate"].value == 200.0
        assert quotas.connection_rate_for_ip("10.0.0.1") == 3 and quotas.connection_rate_for_ip("10.0.0.2") == 4
