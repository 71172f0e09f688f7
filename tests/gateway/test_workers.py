"""``quotaflow gateway --workers 2``: two gateway processes accept on one port (SO_REUSEPORT), both serve clients,
share the kafka:// store, and stop with their supervisor."""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from quotaflow.admin.wire import WireAdmin
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.filters import QuotaFilter
from quotaflow.store.kafka import KafkaStore
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import LOOPBACK, Tansu, api_versions_probe

pytestmark = pytest.mark.broker

_READY = re.compile(r"quotaflow gateway ready: PLAINTEXT=[^\s:]+:(\d+) metrics=http://[^\s:]+:(\d+)")


def _accepted(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://{LOOPBACK}:{metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = re.search(r"^kafka_server_socket_server_metrics_broker_connection_accept_rate (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def _children(pid: int) -> set[int]:
    return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def test_two_workers_share_a_port_and_a_store(tansu: Tansu, tmp_path: Path) -> None:
    store = f"kafka://{tansu.bootstrap}/quotas-{uuid.uuid4().hex[:8]}"
    with KafkaStore(store) as s:
        s.alter([(QuotaEntity(user="alice"), {"producer_byte_rate": 1e6})])
    gw = GatewayProcess(tansu.bootstrap, store, tmp_path, metrics=True, extra_args=("--workers", "2")).start()
    try:
        assert gw.pid is not None
        deadline = time.monotonic() + 30
        while len(ready := _READY.findall(gw.log_path.read_text())) < 2:
            assert time.monotonic() < deadline, gw.log_path.read_text()[-2000:]
            time.sleep(0.1)
        workers = _children(gw.pid)
        assert len(workers) == 2
        assert {int(port) for port, _ in ready} == {gw.port}  # one port, two processes
        for _ in range(60):
            assert api_versions_probe(LOOPBACK, gw.port)
        rates = [_accepted(int(metrics)) for _, metrics in ready]
        assert all(rate > 0 for rate in rates), rates  # the kernel gave each worker some of the connections
        # each worker serves the same store; a round trip through the shared port works whichever answers
        for _ in range(4):
            wire = WireAdmin(gw.bootstrap)
            try:
                assert {d.entity: d.values for d in wire.describe(QuotaFilter())} == {
                    QuotaEntity(user="alice"): {"producer_byte_rate": 1e6}}
            finally:
                wire.close()
        topic = f"w-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
        producer = Producer({"bootstrap.servers": gw.bootstrap})
        for i in range(10):
            producer.produce(topic, b"m%d" % i)
        assert producer.flush(20) == 0
        consumer = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": topic, "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
        consumer.close()
        assert got == [b"m%d" % i for i in range(10)]
    finally:
        gw.stop()
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


_KILLED = re.compile(r"worker (\d+) \(pid (\d+)\) killed by SIGKILL")


def _wait_for(predicate: Callable[[], bool], what: str, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}:\n{log.read_text()[-3000:]}"
        time.sleep(0.05)


def test_a_worker_killed_again_and_again_comes_back_and_the_healthy_one_keeps_serving(
        tansu: Tansu, tmp_path: Path) -> None:
    """Issue 22.4: SIGKILL one worker of ``--workers 2`` three times, each time as soon as its slot is back (within
    a second of its restart: the old supervisor stopped the whole fleet on the second). Connections keep succeeding
    through the healthy worker, the killed slot comes back every time, and the restarts show in the log and in
    /metrics."""
    gw = GatewayProcess(tansu.bootstrap, tmp_path / "quotas.db", tmp_path, metrics=True,
                        extra_args=("--workers", "2")).start()
    try:
        assert gw.pid is not None
        supervisor = gw.pid
        _wait_for(lambda: len(_READY.findall(gw.log_path.read_text())) >= 2, "two workers ready", gw.log_path)
        first = _children(supervisor)
        assert len(first) == 2
        victim = min(first)
        (healthy,) = first - {victim}
        killed: list[int] = []
        for kill in range(1, 4):
            ready_before = len(_READY.findall(gw.log_path.read_text()))
            os.kill(victim, signal.SIGKILL)
            # the supervisor reaped it (its listening socket is gone with it), then ...
            _wait_for(lambda v=victim: not Path(f"/proc/{v}").exists(), "the killed worker reaped", gw.log_path)
            # ... every new connection lands on the healthy worker while the slot waits for its backoff
            for _ in range(20):
                assert api_versions_probe(LOOPBACK, gw.port, timeout=5), gw.log_path.read_text()[-3000:]
            killed.append(victim)
            _wait_for(lambda n=ready_before: len(_READY.findall(gw.log_path.read_text())) > n,
                      f"the slot back after kill {kill}", gw.log_path)
            children = _children(supervisor)
            assert healthy in children and len(children) == 2, children
            (victim,) = children - {healthy}
        for _ in range(20):
            assert api_versions_probe(LOOPBACK, gw.port, timeout=5)
        assert Path(f"/proc/{supervisor}").exists()
        log = gw.log_path.read_text()
        assert "stopping" not in log
        # one slot, named in the log with each pid killed in it, restarted three times
        slots = {int(i) for i, pid in _KILLED.findall(log) if int(pid) in killed}
        assert len(slots) == 1, log[-3000:]
        (slot,) = slots
        assert log.count(f"worker {slot} restarted") == 3
        # every worker's /metrics counts the restarts of every slot
        metrics_ports = [int(m) for _, m in _READY.findall(gw.log_path.read_text())]
        text = ""
        for port in reversed(metrics_ports):  # the newest ready lines are the live workers
            try:
                with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=5) as response:
                    text = response.read().decode()
                break
            except OSError:
                continue
        restarts = re.findall(r"^kafka_server_gateway_workers_restarts.*$", text, re.M)
        assert f'kafka_server_gateway_workers_restarts{{worker="{slot}"}} 3.0' in text, restarts
        other = log.count(f"worker {1 - slot} restarted")  # 0 unless it failed on its own (the log says why)
        assert f'kafka_server_gateway_workers_restarts{{worker="{1 - slot}"}} {float(other)}' in text, (restarts,
                                                                                                       log[-3000:])
        assert f'kafka_server_gateway_workers_ready{{worker="{slot}"}} 1.0' in text
    finally:
        gw.stop()


def test_a_configuration_no_worker_can_start_with_stops_the_supervisor(tmp_path: Path) -> None:
    """Every worker fails before it is ready (an SSL listener without a keystore): the supervisor gives up after
    each slot failed twice, with exit status 1 and a line saying why, instead of restarting them forever."""
    import subprocess
    import sys

    config = tmp_path / "gateway.properties"
    config.write_text("listener.security.protocol.map=PLAINTEXT:SSL\n")
    result = subprocess.run(
        [sys.executable, "-m", "quotaflow.cli.main", "gateway", "--upstream", f"{LOOPBACK}:1", "--listen",
         f"PLAINTEXT={LOOPBACK}:0", "--store", str(tmp_path / "q.db"), "--workers", "2", "--config", str(config)],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "no worker became ready; every slot failed 2 times: stopping" in result.stderr
    assert result.stderr.count("restarting it in") >= 2  # each slot was restarted once before giving up
