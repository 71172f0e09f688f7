"""A consumer under ``consumer_byte_rate`` always makes progress, whatever the size of the upstream's answer
(issue 22 item 1; Kafka's BaseQuotaTest asserts the same for a quota window smaller than the fetch size).

The failure this reproduces: with ``consumer_byte_rate=100000`` the gateway capped ``max_bytes`` at the quota window
(1,000,000 bytes with 11 × 1 s samples), tansu answered beyond it (it returns whole batches, ~2 MB), the response was
throttled, emptied and un-recorded, and the consumer fetched the same offsets again, forever: 0 bytes read. Records
are produced in large batches (librdkafka ``batch.size`` 1,000,000) straight at tansu, then read through the gateway
by a real client (confluent-kafka) for a bounded time. Bytes read are counted by the client itself.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from quotaflow.admin import Admin, Alteration
from quotaflow.cli.main import cli
from quotaflow.core.entities import QuotaEntity
from quotaflow.events import API_FETCH, REQUESTS_DIR, read_dataset
from quotaflow.gateway.config import GatewayConfig
from quotaflow.store import open_store
from quotaflow.testing.tansu import Tansu

from .conftest import GatewayFactory, RunningGateway

pytestmark = [pytest.mark.broker, pytest.mark.slow]

Q = 100_000  # consumer_byte_rate, bytes/s; the window holds Q x (11 - 1) x 1 s = 1,000,000 bytes
RUN_S = 20.0
PRELOAD = 6_000_000  # more than the consumer can read in RUN_S at Q (plus Kafka's one-window burst)
STEADY_WINDOW_NUM = 3  # quota.window.num of the small-batch test: a window of 3 x 1 s samples, Q x 2 s
STEADY_S = 15.0  # its measure: 5 windows of 3 s (40 s held 3.6 windows of 11 s)


def large_batch_topic(bootstrap: str, total: int, value_size: int, partitions: int = 1,
                      batch_size: int = 1_000_000) -> str:
    """A topic filled straight at the broker in batches of up to 1 MB (librdkafka's largest ``batch.size``), or of
    one record each when a record is larger."""
    name = f"progress-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 500, "batch.size": batch_size,
                         "batch.num.messages": 100_000, "compression.type": "none",
                         "message.max.bytes": 2_000_000})
    value = b"s" * value_size
    for i in range(total // value_size):
        producer.produce(name, value, partition=i % partitions)
        producer.poll(0)
    assert producer.flush(60) == 0
    return name


def consume_for(bootstrap: str, topic: str, client_id: str, seconds: float, partitions: int = 1) -> int:
    """Bytes of record values a confluent-kafka consumer reads through ``bootstrap`` in ``seconds``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"g-{client_id}",
                         "enable.auto.commit": False, "fetch.max.bytes": 4_000_000,
                         "max.partition.fetch.bytes": 2_000_000, "receive.message.max.bytes": 5_000_000,
                         "message.max.bytes": 2_000_000})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    read = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                read += len(msg.value() or b"")
    finally:
        consumer.close()
    return read


CASES = [
    (1, 90_000),  # ~11 records per ~1 MB batch: tansu answers ~2 MB, cut to whole batches within the window
    (3, 90_000),
    (1, 1_200_000),  # one record batch larger than the whole window: delivered, throttled after (never emptied)
]
RECONNECTING = "reconnecting"  # the oversized-batch attack's job, beside the cases
RECONNECT_S = (3.0, 3.0, 3.0, 3.0)  # its consumers, one after another


@dataclass(frozen=True)
class Job:
    """Consumers of one client-id through a gateway of their own, one after another, for ``seconds`` each."""

    client_id: str
    value_size: int
    partitions: int
    seconds: tuple[float, ...]


JOBS: dict[object, Job] = {
    **{case: Job("starved", case[1], case[0], (RUN_S,)) for case in CASES},
    RECONNECTING: Job(RECONNECTING, 1_200_000, 1, RECONNECT_S),
}


@dataclass(frozen=True)
class Done:
    """A job, done: its gateway (own store, event log and quota) and the bytes each of its consumers read."""

    gw: RunningGateway
    reads: list[int]


@pytest.fixture(scope="module")
def consumed(tansu: Tansu, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[object, Done]]:
    """Every job's consumers read at once: the three large-batch cases (RUN_S each) and the reconnecting consumers,
    each job through a gateway of its own (its own store, event log and quota sensor under ``consumer_byte_rate``
    Q, nothing shared but tansu) and from a topic of its own. The jobs are independent, so their times are not
    taken one after another; each test then checks its own job."""
    from quotaflow.gateway.server import GatewayThread

    threads: list[GatewayThread] = []
    try:
        gateways: dict[object, RunningGateway] = {}
        topics: dict[object, str] = {}
        for key, job in JOBS.items():
            tmp = tmp_path_factory.mktemp(f"progress-{job.client_id}")
            store, events = tmp / "progress-quotas.db", tmp / "events"
            thread = GatewayThread(tansu.bootstrap, {"PLAINTEXT": "127.0.0.1:0"}, store, event_log=events)
            thread.start()
            threads.append(thread)
            gateways[key] = RunningGateway(thread, store, events)
            admin = Admin(open_store(store))
            try:
                quota = {"consumer_byte_rate": float(Q)}
                assert admin.alter([Alteration.of(QuotaEntity(client_id=job.client_id), quota)])[0].ok
            finally:
                admin.close()
            topics[key] = large_batch_topic(tansu.bootstrap, PRELOAD, job.value_size, job.partitions)
        time.sleep(1.0)  # the quota reaches the gateways within a store poll

        def run(key: object) -> list[int]:
            job = JOBS[key]
            return [consume_for(gateways[key].bootstrap, topics[key], job.client_id, seconds, job.partitions)
                    for seconds in job.seconds]

        with ThreadPoolExecutor(len(JOBS)) as pool:
            reads = {key: pool.submit(run, key) for key in JOBS}
            done = {key: Done(gateways[key], read.result()) for key, read in reads.items()}
        yield done
    finally:
        for thread in reversed(threads):
            thread.stop()


@pytest.mark.parametrize(("partitions", "value_size"), CASES)
def test_a_consumer_under_its_quota_reads_about_its_quota_from_large_batches(
    consumed: dict[object, Done], tmp_path: Path, partitions: int, value_size: int
) -> None:
    done = consumed[(partitions, value_size)]
    gw, (read,) = done.gw, done.reads
    gw.flush_events()
    events = read_dataset(gw.events, REQUESTS_DIR)
    assert events is not None
    fetches = events.filter(pc.and_(pc.equal(events.column("client_id"), "starved"),
                                    pc.equal(events.column("api_key"), API_FETCH)))
    throttled = pc.sum(pc.greater(fetches.column("throttle_ms_fetch"), 0)).as_py()
    report = f"read {read} bytes in {RUN_S:.0f} s = {read / RUN_S / Q:.2f} Q; {throttled} throttled fetches"
    print(report)
    assert read > 0, report
    assert throttled > 0, report  # the quota was enforced, not bypassed
    # Kafka's windowed rate lets a fresh consumer take one window's worth (Q x 10 s) at once, then holds it to Q:
    # over RUN_S it reads at most Q x (RUN_S + 10 s) plus one response. With batches as large as the window, Kafka's
    # rule (a throttled response is emptied) lets one batch in only once the last has left the window: ~0.5 Q in
    # the long run, one or two batches in RUN_S. The bound below is one batch, on a loaded machine: never 0.
    assert 0.3 * Q * RUN_S <= read <= Q * (RUN_S + 10) + 2_000_000, report

    # the backtest's promise holds for these decisions too: the replayed event log decides exactly as live
    out = tmp_path / "replayed"
    result = CliRunner().invoke(cli, ["replay", "--events", str(gw.events), "--store", str(gw.store_path),
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    live = events.to_pandas().set_index("seq").sort_index()
    replayed = pq.read_table(out / "decisions").to_pandas().set_index("seq").sort_index()
    assert list(live.index) == list(replayed.index)
    for col in ("throttle_ms_fetch", "throttle_ms_request", "throttle_ms"):
        diff = live.index[live[col] != replayed[col]]
        assert len(diff) == 0, f"{col}: live != replay at seq {list(diff[:5])}; {report}"


def test_new_connections_do_not_get_past_the_quota_with_oversized_batches(consumed: dict[object, Done]) -> None:
    """The attack on the departure above: an oversized response is delivered only to a consumer within its quota, so
    a consumer that reconnects (new connection, new mute) right after one gets nothing more until its rate is back
    within the quota. Four consumers of the same client-id, one after another, 3 s each, ~12 s in all (the
    ``consumed`` fixture's RECONNECTING job, run beside the large-batch cases): one record."""
    reads = consumed[RECONNECTING].reads
    assert len(reads) == len(RECONNECT_S) == 4
    # 1.2 MB is 12 s of quota: the window holds it for 11 s, so the next one fits no earlier than that
    assert sum(reads) == 1_200_000, reads


def test_a_consumer_of_small_batches_reads_its_quota_steadily(tansu: Tansu, gateway_factory: GatewayFactory) -> None:
    """16 kB batches: each response is cut to the room left in the consumer's window, so it is not emptied by a
    throttle and fetched again. Without that cut, Kafka's rule (responses up to the whole window, emptied when
    throttled) lets one window's worth in only once the last has left it: ~0.5-0.7 Q. Measured on the gateway's own
    log over 5 quota windows (``quota.window.num=3``: 15 s; measured here 1.03-1.13 Q with the cut, 0.64 Q without
    it; with the default 11 samples over 40 s, 1.14 Q and 0.75 Q): at least Kafka's quota_test lower bound, 0.8 Q;
    at most what Kafka's windowed rate allows a fresh consumer, Q x (15 s + 2 s) (one window's worth at once, then
    Q; the rate is bursty by design: a window's worth once the last has left the window)."""
    gw = gateway_factory(config=GatewayConfig(quota_window_num=STEADY_WINDOW_NUM))
    admin = Admin(open_store(gw.store_path))
    try:
        assert admin.alter([Alteration.of(QuotaEntity(client_id="steady"), {"consumer_byte_rate": float(Q)})])[0].ok
    finally:
        admin.close()
    topic = large_batch_topic(tansu.bootstrap, 6_000_000, 4_000, batch_size=16_384)
    time.sleep(1.0)
    start_ms = time.time_ns() // 1_000_000
    consume_for(gw.bootstrap, topic, "steady", STEADY_S)
    gw.flush_events()
    events = read_dataset(gw.events, REQUESTS_DIR)
    assert events is not None
    rows = [r for r in events.to_pylist() if r["client_id"] == "steady" and r["api_key"] == API_FETCH]
    delivered = sum(r["response_bytes"] for r in rows if r["throttle_ms"] == 0 and r["ts_ms"] >= start_ms)
    rate = delivered / STEADY_S
    report = f"{STEADY_S:.0f} s: {rate / Q:.2f} Q over {len(rows)} fetches"
    print(report)
    burst_s = STEADY_WINDOW_NUM - 1  # a fresh consumer's one window's worth, in seconds of Q
    assert 0.8 * Q <= rate <= Q * (STEADY_S + burst_s) / STEADY_S + 10_000, report
