"""Issue 37 item 2: the gateway's descriptors bound its connections. The soft RLIMIT_NOFILE is raised to the hard
limit at start; ``max.connections`` defaults to what the descriptors allow (two per client), so past it the
acceptor waits, as Kafka's does past ``max.connections``, instead of failing accepts with EMFILE."""

from __future__ import annotations

import resource
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from quotaflow.core.keys import INT_MAX
from quotaflow.engine.connection import ConnectionQuotaConfig
from quotaflow.gateway.descriptors import (
    DESCRIPTOR_RESERVE,
    bounded_by_descriptors,
    connection_budget,
    legs_over,
)
from quotaflow.store import open_store
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu

from .conftest import GatewayFactory
from .gateway_wire import Wire


def test_the_budget_is_two_descriptors_a_connection_after_the_reserve() -> None:
    assert connection_budget(1024) == (1024 - DESCRIPTOR_RESERVE) // 2 == 480
    assert connection_budget(10) == 1


def test_max_connections_defaults_to_the_budget_and_is_lowered_to_it() -> None:
    assert bounded_by_descriptors(ConnectionQuotaConfig(), 480).max_connections == 480  # Kafka's default: unset
    assert bounded_by_descriptors(ConnectionQuotaConfig(max_connections=20), 480).max_connections == 20
    assert bounded_by_descriptors(ConnectionQuotaConfig(max_connections=5000), 480).max_connections == 480


def test_with_idle_legs_closed_max_connections_may_be_set_up_to_one_descriptor_a_client() -> None:
    """Idle upstream legs closed (quotaflow.upstream.connections.max.idle.ms): the default stays two descriptors a
    client (all may be active at once), but a max.connections set up to one a client is kept; above it, lowered."""
    budget, ceiling = connection_budget(1024), connection_budget(1024, 1)
    assert ceiling == 1024 - DESCRIPTOR_RESERVE == 960
    assert bounded_by_descriptors(ConnectionQuotaConfig(), budget, ceiling).max_connections == 480
    assert bounded_by_descriptors(ConnectionQuotaConfig(max_connections=900), budget, ceiling).max_connections == 900
    assert bounded_by_descriptors(ConnectionQuotaConfig(max_connections=5000), budget, ceiling).max_connections == 960
    # near the limit, legs are closed early to keep a headroom of 1/20 of it (at least 16)
    assert legs_over(1024, 400, 400) == 0  # 864 + 51 <= 1024
    assert legs_over(1024, 900, 100) == 900 + 100 + DESCRIPTOR_RESERVE + 51 - 1024 == 91
    assert legs_over(256, 150, 60) == 150 + 60 + 64 + 16 - 256


def test_the_soft_open_file_limit_is_raised_to_the_hard_one() -> None:
    """In a child whose soft limit is 64 and hard limit 512: raised to 512 (the test process is left alone)."""
    code = ("import resource; from quotaflow.gateway.descriptors import raise_nofile_limit; "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 512)); print(raise_nofile_limit(), "
            "resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 512:
        pytest.skip("this host's hard open-file limit is below 512")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["512", "512"]


def test_a_gateway_defaults_max_connections_to_its_descriptors(gateway_factory: GatewayFactory) -> None:
    """Unset, max.connections is not Kafka's 2147483647 but what the open-file limit holds."""
    gw = gateway_factory()
    quotas = gw.thread.gateway.connection_quotas
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert quotas.max_connections == connection_budget(nofile) < INT_MAX


def _metadata(wire: Wire) -> MetadataResponse:
    wire.send(MetadataRequest[1](topics=[]), 1)
    return MetadataResponse.decode(wire.recv(), version=1, header=True)


def test_past_max_connections_the_acceptor_waits_and_the_first_keep_working(gateway_factory: GatewayFactory,
                                                                             tmp_path: Path) -> None:
    """max.connections=20: 20 clients are served; the 21st is not accepted (no answer, no error: it waits in the
    listen backlog, as on Kafka) while the 20 keep working; when one of them closes, the 21st is served."""
    config = tmp_path / "server.properties"
    config.write_text("max.connections=20\n")
    gw = gateway_factory(config_path=config, metrics_port=0)
    first = [Wire(gw.address) for _ in range(20)]
    for wire in first:
        assert _metadata(wire).brokers
    late = Wire(gw.address)  # the TCP handshake completes in the kernel's backlog
    late.send(MetadataRequest[1](topics=[]), 1)
    late.sock.settimeout(1.5)
    with pytest.raises(TimeoutError):
        late.sock.recv(4)
    for wire in first:
        assert _metadata(wire).brokers  # the 20 keep working
    samples = {(s.name, s.tags): s.value for s in gw.thread.gateway.connection_quotas.metric_samples(0)}
    assert samples[("connection-count", (("listener", "PLAINTEXT"),))] == 20
    first.pop().sock.close()
    late.sock.settimeout(30)
    assert MetadataResponse.decode(late.recv(), version=1, header=True).brokers
    for wire in [*first, late]:
        wire.sock.close()


@pytest.mark.slow
def test_a_gateway_with_few_descriptors_refuses_cleanly_instead_of_emfile(tansu: Tansu, tmp_path: Path) -> None:
    """A gateway process whose open-file limit is 256 (soft and hard) and 150 clients, each forwarding a
    request (two descriptors each: 300 > 256). The old gateway ran out of descriptors ("accept ... Too many open
    files"; its upstream connects failed too). Now max.connections is (256 - 64) / 2 = 96: those are served, the
    rest wait in the backlog and are served as others close; the gateway never hits EMFILE, and a new producer
    bootstraps once the crowd is gone."""
    store = tmp_path / "few.db"
    open_store(store).close()
    gw = GatewayProcess(tansu.bootstrap, store, tmp_path / "gw", nofile=256).start()
    try:
        clients: list[socket.socket] = []
        for _ in range(150):
            sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            request = MetadataRequest[1](topics=[])
            request.with_header(correlation_id=1, client_id="crowd")
            sock.sendall(bytes(request.encode(version=1, header=True, framed=True)))
            clients.append(sock)
        answered = 0
        for sock in clients:
            sock.settimeout(0.2 if answered >= 96 else 10)
            try:
                size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
                assert size > 0
                answered += 1
            except TimeoutError:
                pass
        assert answered == 96, answered
        for sock in clients:
            sock.close()
        topic = f"few-{uuid.uuid4().hex[:8]}"
        producer = Producer({"bootstrap.servers": gw.bootstrap, "socket.timeout.ms": 10_000})
        producer.produce(topic, b"after the crowd")
        assert producer.flush(30) == 0
        time.sleep(0.5)
        assert gw.pid is not None and gw._proc is not None and gw._proc.poll() is None
        log = gw.log_path.read_text(errors="replace")
        assert "Too many open files" not in log, log[-2000:]
    finally:
        gw.stop()
