"""Shadow quotas through real gateways in front of tansu (issue 36): a proposal started as a shadow on a running
gateway shows its would-be throttles in ``/metrics`` within seconds while nothing is enforced; replaying the event
log under the shadow's quotas reproduces its shadow columns row for row (and under the enforced ones the live
columns); and a promotion switches two gateway processes on one store (SQLite, kafka://) at the same instant.

Traffic: confluent-kafka (librdkafka) producing, kafka-python consuming, Metadata over a raw socket, and bursts of TCP
connections; bounded (~6 s of traffic), loopback only.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, TopicPartition
from kafka.protocol.metadata import MetadataRequest

from quotaflow.cli.main import cli
from quotaflow.core.entities import QuotaEntity
from quotaflow.events import CONNECTIONS_DIR, REQUESTS_DIR, read_dataset
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.data.shadow import overrides_of, shadow_entities
from quotaflow.store import open_store
from quotaflow.testing.tansu import Tansu

from .conftest import GatewayFactory, RunningGateway
from .gateway_wire import Wire

pytestmark = [pytest.mark.broker, pytest.mark.slow]

VALUE = b"s" * 4_000
RUN_S = 6.0
ENFORCED: dict[QuotaEntity, dict[str, float]] = {
    QuotaEntity(client_id="sh-prod"): {"producer_byte_rate": 10_000_000.0},
    QuotaEntity(client_id="sh-cons"): {"consumer_byte_rate": 50_000_000.0},
}
SHADOW = (
    (QuotaEntity(client_id="sh-prod"), {"producer_byte_rate": 40_000.0}),  # tighter
    (QuotaEntity(client_id="sh-cons"), {"consumer_byte_rate": 30_000.0}),  # tighter
    (QuotaEntity(client_id="sh-meta"), {"request_percentage": 1.0}),  # new
    (QuotaEntity(ip="127.0.0.1"), {"connection_creation_rate": 4.0}),  # new
)
LIVE = ("throttle_ms_produce", "throttle_ms_fetch", "throttle_ms_request", "throttle_ms")
CONFIG = GatewayConfig(store_poll_ms=100)


def _topic(bootstrap: str, preload: int) -> str:
    name = f"shadow-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    for _ in range(preload // len(VALUE)):
        producer.produce(name, VALUE)
        producer.poll(0)
    assert producer.flush(30) == 0
    return name


def _produce(bootstrap: str, topic: str, stop: threading.Event, client_id: str = "sh-prod",
             per_s: int = 40) -> None:
    """~160 kB/s: within the enforced rate, four times the shadow's."""
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "acks": 1})
    while not stop.is_set():
        p.produce(topic, VALUE)
        p.poll(1 / per_s)
    p.purge()
    p.flush(5)


def _consume(bootstrap: str, topic: str, stop: threading.Event) -> None:
    c = KafkaConsumer(bootstrap_servers=bootstrap, client_id="sh-cons", group_id=None, enable_auto_commit=False,
                      max_partition_fetch_bytes=32_768, fetch_max_bytes=32_768)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    try:
        while not stop.is_set():
            c.poll(timeout_ms=100)
    finally:
        c.close()


def _metadata(address: tuple[str, int], stop: threading.Event) -> None:
    wire = Wire(address)
    try:
        while not stop.is_set():
            wire.send(MetadataRequest[12](topics=None, allow_auto_topic_creation=False), 12, client_id="sh-meta")
            wire.recv()
            time.sleep(0.002)
    finally:
        wire.sock.close()


def _connect_bursts(address: tuple[str, int], stop: threading.Event) -> None:
    """~25 connections a second: more than the shadow's ip rate allows over its window (the enforced has none)."""
    while not stop.is_set():
        for _ in range(5):
            with socket.create_connection(address, timeout=5):
                pass
        stop.wait(0.2)


def _metrics(gw: RunningGateway) -> str:
    with urllib.request.urlopen(gw.http_url + "/metrics", timeout=10) as response:
        return str(response.read().decode())


def _positive(text: str, family: str) -> bool:
    return any(float(m.group(1)) > 0 for m in re.finditer(rf"^{family}{{[^}}]*}} (\S+)$", text, re.M)
               if m.group(1) not in ("NaN",))


def _replay(events: Path, entities: dict[QuotaEntity, dict[str, float]], tmp_path: Path, name: str) -> Path:
    store = tmp_path / f"{name}.db"
    with open_store(store) as s:
        s.alter(list(entities.items()))
    out = tmp_path / name
    result = CliRunner().invoke(cli, ["replay", "--events", str(events), "--store", str(store), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.spark
def test_a_shadow_shows_within_seconds_and_replaying_the_log_under_it_reproduces_its_columns(
    gateway_factory: GatewayFactory, tansu: Tansu, tmp_path: Path, spark: Any
) -> None:
    topic_in, topic_out = _topic(tansu.bootstrap, 0), _topic(tansu.bootstrap, 1_500_000)
    store_path = tmp_path / "shadow-quotas.db"
    with open_store(store_path) as store:
        store.alter(list(ENFORCED.items()))
    gw = gateway_factory(store=store_path, metrics_port=0, config=CONFIG)
    with open_store(store_path) as store:
        started = store.start_shadow("tighter", "test", SHADOW)
    t0 = time.monotonic()
    while gw.thread.gateway.broker_quotas.shadow is None:  # read within a poll or two (100 ms)
        assert time.monotonic() - t0 < 10, "the gateway never read the shadow set"
        time.sleep(0.05)
    stop = threading.Event()
    workers = [lambda: _produce(gw.bootstrap, topic_in, stop), lambda: _consume(gw.bootstrap, topic_out, stop),
               lambda: _metadata(gw.address, stop), lambda: _connect_bursts(gw.address, stop)]
    threads = [threading.Thread(target=w, daemon=True) for w in workers]
    for t in threads:
        t.start()
    seen_s = None
    try:
        deadline = time.monotonic() + RUN_S
        while time.monotonic() < deadline:
            text = _metrics(gw)
            if seen_s is None and all(_positive(text, f"kafka_server_shadow_{t}_throttle_time")
                                      for t in ("produce", "fetch", "request")):
                seen_s = time.monotonic() - t0
                assert not any(_positive(text, f"kafka_server_{t}_throttle_time")
                               for t in ("produce", "fetch", "request")), "the shadow's throttles were applied"
                assert _positive(text, "kafka_server_shadow_throttled_requests_total")
            time.sleep(0.25)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert seen_s is not None, "the shadow's throttles never showed in /metrics"
    text = _metrics(gw)
    assert f'shadow_id="{started.id}"' in text
    refused = [line for line in text.splitlines() if line.startswith("kafka_server_shadow_connections_total{")
               and 'result="refused"' in line and f'shadow_id="{started.id}"' in line]
    assert refused and float(refused[0].rsplit(" ", 1)[1]) > 0, refused
    gw.flush_events()

    live = read_dataset(gw.events, REQUESTS_DIR)
    conns = read_dataset(gw.events, CONNECTIONS_DIR)
    assert live is not None and conns is not None
    live_df = live.to_pandas().set_index("seq").sort_index()
    assert set(live_df["shadow_id"]) == {started.id}  # every row was decided under the shadow too
    assert (live_df["throttle_ms"] == 0).all()  # nothing enforced throttled
    shadow_throttled = {c: int((live_df[f"shadow_{c}"] > 0).sum()) for c in LIVE}
    assert min(shadow_throttled.values()) > 0, shadow_throttled

    enforced_out = _replay(gw.events, ENFORCED, tmp_path, "enforced")
    shadow_out = _replay(gw.events, shadow_entities(ENFORCED, overrides_of(SHADOW)), tmp_path, "shadowed")
    for out, prefix in ((enforced_out, ""), (shadow_out, "shadow_")):
        replayed = pq.read_table(out / "decisions").to_pandas().set_index("seq").sort_index()
        assert list(replayed.index) == list(live_df.index)
        for col in LIVE:
            diff = live_df.index[live_df[prefix + col] != replayed[col]]
            assert len(diff) == 0, f"{prefix}{col}: live != replay at seq {list(diff[:5])} ({shadow_throttled})"

    conns_df = conns.to_pandas().set_index("seq").sort_index()
    assert set(conns_df["shadow_id"]) == {started.id}
    assert (conns_df["result"] == "ACCEPTED").all() and (conns_df["shadow_result"] == "IP_THROTTLED").any()
    replayed_c = pq.read_table(shadow_out / "connections").to_pandas().set_index("seq").sort_index()
    assert list(replayed_c.index) == list(conns_df.index)
    assert list(conns_df["shadow_result"]) == list(replayed_c["result"])
    assert list(conns_df["shadow_ip_throttle_ms"]) == list(replayed_c["ip_throttle_ms"])
    assert list(conns_df["shadow_accept_delay_ms"]) == list(replayed_c["accept_delay_ms"])
    # the Spark report over the same log: every logged decision, live and shadow, equals its replay (--strict), and
    # enforced vs shadow equals `backtest --compare` of a store holding the shadow's quotas over the same events
    report = tmp_path / "report"
    result = CliRunner().invoke(cli, ["shadow", "report", "--events", str(gw.events), "--store", str(store_path),
                                      "--out", str(report), "--strict"])
    assert result.exit_code == 0, result.output
    checks = json.loads((report / "_SUMMARY.json").read_text())
    for kind, rows in (("requests", len(live_df)), ("connections", len(conns_df))):
        for check in ("live", "shadow"):
            assert checks[kind]["check"][check] == {"checked": rows, "mismatched": 0}, (kind, check, checks[kind])
    backtest = tmp_path / "backtest"
    result = CliRunner().invoke(cli, ["backtest", "--events", str(gw.events), "--store", str(tmp_path / "enforced.db"),
                                      "--compare", str(tmp_path / "shadowed.db"), "--out", str(backtest)])
    assert result.exit_code == 0, result.output
    for name, keys in (("compare", ["tag_user", "tag_client_id", "quota_type", "broker"]), ("compare_summary", [])):
        mine, theirs = (pq.read_table(d / name).to_pandas() for d in (report, backtest))
        keys = [k for k in keys if k in mine.columns]
        if keys:
            mine, theirs = (x.sort_values(keys).reset_index(drop=True) for x in (mine, theirs))
        assert len(mine) > 0
        pd.testing.assert_frame_equal(mine, theirs, check_exact=True, obj=name)
    print(f"shadow in /metrics after {seen_s:.2f} s; {len(live_df)} requests, shadow throttled {shadow_throttled}; "
          f"{len(conns_df)} connections, {int((conns_df['shadow_result'] == 'IP_THROTTLED').sum())} refused in shadow")


@pytest.mark.parametrize("backend", ["sqlite", "kafka"])
def test_a_promotion_switches_two_gateways_on_one_store_at_the_same_instant(
    backend: str, tansu: Tansu, tmp_path: Path
) -> None:
    """Two ``quotaflow gateway`` processes on one store, SQLite or kafka://, a producer through each: both switch at
    the promotion's effective_ms, each at its first decision from that instant, as their event logs show."""
    from quotaflow.testing.gateway_process import GatewayProcess

    topic = _topic(tansu.bootstrap, 0)
    store: str | Path = (tmp_path / "promote-quotas.db" if backend == "sqlite"
                         else f"kafka://{tansu.bootstrap}/quotas-{uuid.uuid4().hex[:8]}")
    entity = QuotaEntity(client_id="pr-prod")
    with open_store(store) as s:
        s.alter([(entity, {"producer_byte_rate": 10_000_000.0})])
        shadow = s.start_shadow("promote-me", "test", [(entity, {"producer_byte_rate": 40_000.0})])
    props = tmp_path / "gateway.properties"
    props.write_text("quotaflow.store.poll.ms=100\n")
    gateways = [GatewayProcess(tansu.bootstrap, store, tmp_path / f"gw-{i}", event_log=tmp_path / f"events-{i}",
                               extra_args=("--config", str(props))) for i in range(2)]
    try:
        for gw in gateways:
            gw.start()
        stop = threading.Event()
        threads = [threading.Thread(target=_produce, args=(gw.bootstrap, topic, stop, "pr-prod"), daemon=True)
                   for gw in gateways]
        for t in threads:
            t.start()
        try:
            time.sleep(2)
            with open_store(store) as s:
                promotion = s.promote_shadow("test", int(time.time() * 1000) + 3_000)
            time.sleep(5)
        finally:
            stop.set()
            for t in threads:
                t.join(30)
    finally:
        for gw in gateways:
            gw.stop(30)  # SIGTERM: the event log is flushed
    effective = promotion.effective_ms
    for i, gw in enumerate(gateways):
        assert "after its effective time" not in gw.log_path.read_text()  # read in time: no late switch
        rows = read_dataset(tmp_path / f"events-{i}", REQUESTS_DIR)
        assert rows is not None
        df = rows.to_pandas().sort_values(["ts_ms", "seq"])
        before, after = df[df["ts_ms"] < effective], df[df["ts_ms"] >= effective]
        assert len(before) and len(after)
        # before the instant: the old quotas decided (nothing throttled) and the shadow still ran; from it: the
        # promoted quotas decided and the shadow was gone
        assert (before["throttle_ms"] == 0).all() and (before["shadow_id"] == shadow.id).all()
        assert before["shadow_throttle_ms_produce"].gt(0).any()
        assert after["shadow_id"].isna().all() and after["throttle_ms_produce"].gt(0).any()


def test_topic_mutations_meet_the_shadows_controller_mutation_quota_and_only_it(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    """KIP-599 in shadow: a CreateTopics the enforced quotas let through entirely is throttled in the shadow's
    columns only, by the shadow's own token bucket recorded with the same topics."""
    from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse

    store_path = tmp_path / "mutation-quotas.db"
    with open_store(store_path) as store:
        started = store.start_shadow("mutations", "test",
                                     [(QuotaEntity(client_id="creator"), {"controller_mutation_rate": 2.0})])
    config = GatewayConfig(store_poll_ms=100, controller_quota_window_num=2, controller_quota_window_size_seconds=1)
    gw = gateway_factory(store=store_path, config=config)
    stamp = time.time_ns()
    names = [f"m-{stamp}-{i}" for i in range(3)]
    t = CreateTopicsRequest.CreatableTopic
    wire = Wire(gw.address)
    wire.send(CreateTopicsRequest[6](topics=[t(name=n, num_partitions=3, replication_factor=1, assignments=[],
                                                configs=[]) for n in names], timeout_ms=10_000, validate_only=False),
              6, client_id="creator")
    response = CreateTopicsResponse.decode(wire.recv(), version=6, header=True)
    wire.sock.close()
    assert sorted((r.name, r.error_code) for r in response.topics) == [(n, 0) for n in names]  # nothing refused
    assert response.throttle_time_ms == 0
    gw.flush_events()
    rows = read_dataset(gw.events, REQUESTS_DIR)
    assert rows is not None
    created = [r for r in rows.to_pylist() if r["api_key"] == 19]
    assert len(created) == 1 and created[0]["throttle_ms"] == 0 and created[0]["shadow_id"] == started.id
    # 4 permits in the shadow's bucket, 9 taken (strict: the third topic would have been refused): in debt
    assert created[0]["shadow_throttle_ms"] > 0 and created[0]["shadow_throttle_ms_request"] == 0
