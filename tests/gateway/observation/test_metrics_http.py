"""The metrics endpoint: Prometheus text over real HTTP on 127.0.0.1, connection-quota metrics, JSON routes."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from quotaflow.core.errors import ConnectionThrottledError
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas
from quotaflow.gateway.observation.metrics_http import MetricsServer

T0 = 1_000_000


def fetch(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def quotas_with_traffic() -> ConnectionQuotas:
    q = ConnectionQuotas(ConnectionQuotaConfig(quota_window_num=2, inter_broker_listener="REPLICATION"))
    q.add_listener("EXTERNAL")
    q.add_listener("REPLICATION")
    q.update_ip_connection_rate_quota("127.0.0.2", 2)
    for _ in range(2):
        q.inc("EXTERNAL", "127.0.0.2", T0)
    with pytest.raises(ConnectionThrottledError, match="throttled for 500"):
        q.inc("EXTERNAL", "127.0.0.2", T0)
    return q


def test_serves_prometheus_text_and_json_routes() -> None:
    async def body() -> tuple[tuple[int, str, bytes], ...]:
        server = MetricsServer("127.0.0.1", 0, clock_ms=lambda: T0)
        server.add_source(quotas_with_traffic())
        server.add_json_route("/resolve", lambda q: {"ip": q.get("ip", ["?"])[0]})
        server.add_json_route("/bad", lambda q: (_ for _ in ()).throw(ValueError("nope")))
        server.add_json_route("/echo", lambda q: {k: v[0] for k, v in q.items()})
        await server.start()
        try:
            base = f"http://{server.address[0]}:{server.address[1]}"
            return tuple(
                await asyncio.gather(*(asyncio.to_thread(fetch, base + p) for p in
                                       ("/metrics", "/resolve?ip=127.0.0.2", "/bad", "/nothing",
                                        "/echo?user=&client-id=c1")))
            )
        finally:
            await server.close()

    metrics, resolve, bad, missing, echo = asyncio.run(body())
    assert metrics[0] == 200 and metrics[1].startswith("text/plain")
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(metrics[2].decode())
        for s in fam.samples
    }
    prefix = "kafka_server_socket_server_metrics_"
    assert values[(prefix + "broker_connection_accept_rate", ())] == 2.0  # 2 accepted / 1 s padded window
    assert values[(prefix + "connection_accept_rate", (("ip", ""), ("listener", "EXTERNAL")))] == 2.0
    assert values[(prefix + "connection_accept_rate", (("ip", "127.0.0.2"), ("listener", "")))] == 2.0
    assert values[(prefix + "ip_connection_accept_throttle_time", (("listener", "EXTERNAL"),))] == 500.0
    assert ("kafka_server_acceptor_acceptor_blocked_percent", (("listener", "REPLICATION"),)) in values
    assert resolve[0] == 200 and json.loads(resolve[2]) == {"ip": "127.0.0.2"}
    assert bad[0] == 400 and json.loads(bad[2]) == {"error": "nope"}
    assert missing[0] == 404
    assert echo[0] == 200 and json.loads(echo[2]) == {"user": "", "client-id": "c1"}  # a blank name is a name


def test_render_rejects_other_methods() -> None:
    assert MetricsServer().render("POST", "/metrics")[0] == 405


def test_live_listener_metrics_are_scraped() -> None:
    from quotaflow.gateway.listener import AcceptedConnection, QuotaListener

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, c: AcceptedConnection) -> None:
        await reader.read()

    async def body() -> bytes:
        quotas = ConnectionQuotas(ConnectionQuotaConfig(quota_window_num=2))
        quotas.update_ip_connection_rate_quota("127.0.0.2", 1)
        listener = QuotaListener({"EXTERNAL": ("127.0.0.1", 0)}, quotas, handler)
        server = MetricsServer(sources=[quotas])
        await listener.start()
        await server.start()
        try:
            host, port = listener.addresses["EXTERNAL"]
            writers = []
            for _ in range(3):  # 1 accepted, then IP-throttled
                _, w = await asyncio.open_connection(host, port, local_addr=("127.0.0.2", 0))
                writers.append(w)
            while listener.stats["EXTERNAL"].ip_throttled < 2:
                await asyncio.sleep(0.01)
            status, _, text = await asyncio.to_thread(fetch, f"http://{server.address[0]}:{server.address[1]}/metrics")
            assert status == 200
            for w in writers:
                w.close()
            return text
        finally:
            await server.close()
            await listener.close()

    text = asyncio.run(asyncio.wait_for(body(), 30)).decode()
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for fam in text_string_to_metric_families(text) for s in fam.samples}
    prefix = "kafka_server_socket_server_metrics_"
    assert values[(prefix + "connection_accept_rate", (("ip", "127.0.0.2"), ("listener", "")))] > 0
    assert values[(prefix + "ip_connection_accept_throttle_time", (("listener", "EXTERNAL"),))] > 0
    # throttled connections were rolled back out of the broker rate: 1 connection over a window of >= 1 s
    # (all 3 would give >= 2/s while the window is under 1.5 s)
    assert 0.5 < values[(prefix + "broker_connection_accept_rate", ())] <= 1.0
