"""The event log of a real ``quotaflow gateway`` process: every request it answered is in the log after SIGTERM, and a
disk that refuses the log's files (the kernel's EFBIG under RLIMIT_FSIZE) neither stops the gateway nor goes
unreported. Bounded: a few hundred requests on loopback, tansu upstream."""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from quotaflow.events import REQUESTS_DIR, read_dataset
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu

from .gateway_wire import Wire

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def create_topic(bootstrap: str) -> str:
    name = f"evlog-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    return name


def produce_request(topic: str) -> ProduceRequest:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=None, key=None, value=b"e" * 1024, headers=[])
    builder.close()
    t = ProduceRequest.TopicProduceData
    return ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        t(name=topic, partition_data=[t.PartitionProduceData(index=0, records=bytes(builder.buffer()))])])


def produce(port: int, topic: str, client_id: str, one_at_a_time: int, pipelined: int) -> int:
    """Produce requests answered by the gateway: ``one_at_a_time`` in turn, then ``pipelined`` sent at once."""
    wire = Wire(("127.0.0.1", port))
    wire.sock.settimeout(30)
    answered = 0
    try:
        for _ in range(one_at_a_time):
            wire.send(produce_request(topic), 9, client_id)
            wire.recv()
            answered += 1
        for _ in range(pipelined):
            wire.send(produce_request(topic), 9, client_id)
        for _ in range(pipelined):
            wire.recv()
            answered += 1
    finally:
        wire.sock.close()
    return answered


def produce_rows(events: Path, client_id: str) -> int:
    table = read_dataset(events, REQUESTS_DIR)
    if table is None:
        return 0
    return sum(1 for row in table.select(["client_id", "api_key"]).to_pylist()
               if row["client_id"] == client_id and row["api_key"] == 0)


def test_every_answered_request_is_in_the_log_after_sigterm(tansu: Tansu, tmp_path: Path) -> None:
    topic = create_topic(tansu.bootstrap)
    events = tmp_path / "events"
    gw = GatewayProcess(tansu.bootstrap, tmp_path / "quotas.db", tmp_path / "gw", event_log=events).start()
    proc = gw._proc
    assert proc is not None
    try:
        answered = produce(gw.port, topic, "sigterm-test", one_at_a_time=100, pipelined=400)
    finally:
        gw.stop(timeout=30)  # SIGTERM right after the last answer: the rows are still in memory
    assert proc.returncode == 0, (tmp_path / "gw" / "gateway.log").read_text()[-2000:]
    assert answered == 500
    assert produce_rows(events, "sigterm-test") == answered
    assert not [p for p in (events / REQUESTS_DIR).iterdir() if p.name.startswith(".")]  # no partial file


class SmallFileLimitGateway(GatewayProcess):
    """The gateway under ``prlimit --fsize``: every file it writes is limited to ``limit`` bytes, so Parquet files
    larger than that fail with EFBIG (Python ignores SIGXFSZ), as writes to a full disk fail with ENOSPC."""

    def __init__(self, *args: object, limit: int, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.limit = limit

    def command(self) -> list[str]:
        return ["prlimit", f"--fsize={self.limit}:{self.limit}", "--", *super().command()]


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    found = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    assert found is not None, f"{name} not in /metrics"
    return float(found.group(1))


def test_a_disk_that_refuses_the_log_does_not_stop_the_gateway_and_is_reported(tansu: Tansu,
                                                                              tmp_path: Path) -> None:
    topic = create_topic(tansu.bootstrap)
    events = tmp_path / "events"
    # 64 KB: the store, the gateway's own log lines and the ready line fit; a Parquet file of 8,000 requests (~120
    # KB) does not
    gw = SmallFileLimitGateway(tansu.bootstrap, tmp_path / "quotas.db", tmp_path / "gw", event_log=events,
                               metrics=True, limit=64 * 1024)
    gw.start()
    proc = gw._proc
    assert proc is not None and gw.http_url is not None
    try:
        answered = sum(produce(gw.port, topic, "efbig-test", one_at_a_time=0, pipelined=2000) for _ in range(4))
        deadline = time.monotonic() + 30  # the 5 s roll, then the refused write
        while metric(gw.http_url, "kafka_server_event_log_write_errors") == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert metric(gw.http_url, "kafka_server_event_log_write_errors") >= 1
        assert metric(gw.http_url, "kafka_server_event_log_rows_buffered") >= 8000  # kept, not lost
        # still serving everyone while the log cannot be written
        assert produce(gw.port, topic, "efbig-after", one_at_a_time=20, pipelined=0) == 20
    finally:
        gw.stop(timeout=60)
    assert answered == 8000
    log = (tmp_path / "gw" / "gateway.log").read_text()
    assert "cannot write" in log and "File too large" in log and "keeps serving" in log
    assert re.search(r"dropped \d+ requests row\(s\) \(seq \d+\.\.\d+\): the disk still refused them at close", log)
    assert produce_rows(events, "efbig-test") == 0
