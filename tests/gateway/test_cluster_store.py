"""``--store kafka://``: gateway processes on one tansu share one store topic. An alter through one is described
through the other within 2 s, concurrent alters of one entity through both lose no operation, and a gateway
started after a kill -9 rebuilds its view from the topic; ``quotaflow store copy`` moves a store both ways."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from quotaflow.admin import Alteration, DescribedEntity
from quotaflow.admin.wire import WireAdmin
from quotaflow.cli.main import cli
from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.errors import StoreError
from quotaflow.core.filters import FilterComponent, QuotaFilter
from quotaflow.gateway.auth.sasl import hash_password, verify_password
from quotaflow.store import open_store
from quotaflow.store.kafka import KafkaStore
from quotaflow.store.scram import scram_credential
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu

from .conftest import GatewayFactory

pytestmark = pytest.mark.broker

ALICE = QuotaEntity(user="alice")
SHARED = QuotaEntity(user="shared", client_id="app")
ROUNDS = 15


def _url(tansu: Tansu) -> str:
    return f"kafka://{tansu.bootstrap}/quotas-{uuid.uuid4().hex[:8]}"


def _only(entity: QuotaEntity) -> QuotaFilter:
    return QuotaFilter.contains_only([FilterComponent.exact(t.value, str(n)) for t, n in entity.items()])


def _writer(wire: WireAdmin, key: str, errors: list[str]) -> None:
    for i in range(1, ROUNDS + 1):
        result = wire.alter([Alteration.of(SHARED, {key: float(i)})])[0]
        if not result.ok:
            errors.append(str(result.error))


def test_two_gateways_one_store_topic(tansu: Tansu, tmp_path: Path) -> None:
    url = _url(tansu)
    a = GatewayProcess(tansu.bootstrap, url, tmp_path / "a").start()
    try:
        with GatewayProcess(tansu.bootstrap, url, tmp_path / "b") as b:
            wa, wb = WireAdmin(a.bootstrap), WireAdmin(b.bootstrap)
            try:
                # an alter through one gateway, described through the other (within a second on a quiet machine:
                # quotaflow.store.poll.ms is 250 ms; the bound leaves room for a loaded one: the test is that it
                # arrives)
                started = time.monotonic()
                assert wa.alter([Alteration.of(ALICE, {"producer_byte_rate": 1024.0})])[0].ok
                expected = [DescribedEntity(ALICE, {"producer_byte_rate": 1024.0})]
                while wb.describe(_only(ALICE)) != expected:
                    assert time.monotonic() - started < 20.0, "not visible through the other gateway in 20 s"
                    time.sleep(0.02)
                # concurrent alters of one entity through both gateways: every operation is in the log
                errors: list[str] = []
                threads = [threading.Thread(target=_writer, args=(wa, "producer_byte_rate", errors)),
                           threading.Thread(target=_writer, args=(wb, "consumer_byte_rate", errors))]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(60)
                assert errors == []
            finally:
                wa.close()
                wb.close()
            with KafkaStore(url) as store:
                changes = [c for c in store.changes_since(0) if c.entity == SHARED]
                assert sorted((c.key, c.value) for c in changes) == sorted(
                    (k, float(i)) for k in ("producer_byte_rate", "consumer_byte_rate") for i in range(1, ROUNDS + 1))
                assert store.get(SHARED) == {"producer_byte_rate": float(ROUNDS), "consumer_byte_rate": float(ROUNDS)}
                store.alter([(QuotaEntity(user=DEFAULT), {"request_percentage": 200.0})])
                store.put_credential(hash_password("carol", "pw-c", iterations=1000))
                truth = store.snapshot().entities
            # kill -9 one gateway; a new one on the same topic rebuilds the whole view from it
            assert a.pid is not None
            os.kill(a.pid, signal.SIGKILL)
            a.stop()  # reaps it
            a = GatewayProcess(tansu.bootstrap, url, tmp_path / "c").start()
            wc = WireAdmin(a.bootstrap)
            try:
                described = {d.entity: d.values for d in wc.describe(QuotaFilter())}
                assert described == truth and len(truth) == 3
            finally:
                wc.close()
    finally:
        a.stop()


def test_store_copy_sqlite_to_cluster_and_back(tansu: Tansu, tmp_path: Path) -> None:
    url, first, back = _url(tansu), tmp_path / "first.db", tmp_path / "back.db"
    with open_store(first) as src:
        src.alter([(ALICE, {"producer_byte_rate": 1e6, "request_percentage": 25.0}),
                   (QuotaEntity(client_id=DEFAULT), {"consumer_byte_rate": 5e5}),
                   (QuotaEntity(ip=DEFAULT), {"connection_creation_rate": 20.0})])
        src.put_credential(hash_password("dave", "pw-d", iterations=1000))
        erin = scram_credential("erin", "SCRAM-SHA-512", "pw-e", iterations=4096)
        src.put_scram_credential(erin)
        truth = src.snapshot().entities
    runner = CliRunner()
    result = runner.invoke(cli, ["store", "copy", str(first), url])
    assert result.exit_code == 0 and "Copied 3 entities and 2 users" in result.output, result.output
    result = runner.invoke(cli, ["store", "copy", url, str(back)])
    assert result.exit_code == 0, result.output
    with open_store(back) as dst:
        assert dst.snapshot().entities == truth
        dave = dst.get_credential("dave")
        assert dave is not None and verify_password(dave, "pw-d")
        assert dst.get_scram_credential("erin", "SCRAM-SHA-512") == erin
    # the CLIs take the URL too
    result = runner.invoke(cli, ["client-quotas", "--describe", "--names", "user=alice", "--store", url])
    assert result.exit_code == 0 and "producer_byte_rate=1000000.0" in result.output, result.output
    result = runner.invoke(cli, ["users", "list", "--store", url])
    assert result.exit_code == 0 and result.stdout == "dave\nerin\n", result.output  # stderr may say it is connecting


def test_replay_reads_a_cluster_store_as_a_snapshot(tansu: Tansu, tmp_path: Path) -> None:
    """The pipeline takes the URL: replay against the store copied into the cluster decides exactly as against the
    SQLite file."""
    import pyarrow.parquet as pq

    from quotaflow.pipeline.generate import TrafficSpec, generate

    generate(TrafficSpec(events=3_000, seed=5, rate=1_000), tmp_path / "events")
    sqlite, url = tmp_path / "q.db", _url(tansu)
    with open_store(sqlite) as st:
        st.alter([(QuotaEntity(user=DEFAULT), {"producer_byte_rate": 2e4, "request_percentage": 0.5}),
                  (QuotaEntity(client_id=DEFAULT), {"consumer_byte_rate": 5e4}),
                  (QuotaEntity(ip=DEFAULT), {"connection_creation_rate": 5.0})])
    runner = CliRunner()
    assert runner.invoke(cli, ["store", "copy", str(sqlite), url]).exit_code == 0
    outputs = []
    for store in (str(sqlite), url):
        out = tmp_path / f"out-{len(outputs)}"
        result = runner.invoke(cli, ["replay", "--events", str(tmp_path / "events"), "--store", store, "--out",
                                     str(out)])
        assert result.exit_code == 0, result.output
        outputs.append(pq.read_table(out / "decisions").sort_by([("broker", "ascending"), ("seq", "ascending")]))
    assert outputs[0].equals(outputs[1])
    assert sum(outputs[0].column("throttle_ms").to_pylist()) > 0  # the quotas did throttle: a real comparison


def test_client_settings_reach_the_cluster_sasl(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """The store's connection takes Kafka client properties: here SASL/PLAIN through a gateway's SASL_PLAINTEXT
    listener in front of tansu (the gateway checks the password), from a properties file named by ``config=``."""
    gw = gateway_factory(listeners={"SASL_PLAINTEXT": "127.0.0.1:0"})
    with open_store(gw.store_path) as local:
        local.put_credential(hash_password("alice", "alice-secret", iterations=1000))
    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    for password, ok in (("alice-secret", True), ("wrong", False)):
        props = tmp_path / f"client-{ok}.properties"
        props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                         "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                         f'username="alice" password="{password}";\n')
        url = f"kafka://{gw.bootstrap}/{topic}?config={props}&request.timeout.ms=5000"
        if ok:
            with KafkaStore(url) as store:
                store.alter([(ALICE, {"producer_byte_rate": 5.0})])
            with KafkaStore(url) as again:
                assert again.get(ALICE) == {"producer_byte_rate": 5.0}
        else:
            with pytest.raises(StoreError):
                KafkaStore(url)
