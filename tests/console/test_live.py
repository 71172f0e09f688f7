"""The Live page's data: scrapes of the gateways' /metrics, quotas from the store, bounded history; and the page
itself against a real gateway in front of tansu, with a producer held to its quota."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from playwright.sync_api import expect
from starlette.testclient import TestClient

from gateway.conftest import GatewayFactory, gateway_factory, tansu  # noqa: F401  (fixtures, used by name)
from quotaflow.admin import Admin, Alteration, QuotaIndex
from quotaflow.console import ConsoleConfig, create_app
from quotaflow.console.live import LiveMetrics
from quotaflow.core.entities import QuotaEntity
from quotaflow.store.sqlite import SqliteStore
from quotaflow.testing.asgi import serve

from .browser import browser, screenshot

SCRAPE = """# TYPE kafka_server_produce_byte_rate gauge
kafka_server_produce_byte_rate{user="alice",client_id=""} 2500000.0
kafka_server_produce_byte_rate{user="user%20with%20spaces",client_id=""} 10.0
kafka_server_produce_byte_rate{user="",client_id="batch-loader"} 100.0
# TYPE kafka_server_produce_throttle_time gauge
kafka_server_produce_throttle_time{user="alice",client_id=""} 412.5
# TYPE kafka_server_request_request_time gauge
kafka_server_request_request_time{user="bob",client_id="cli"} 12.5
# TYPE kafka_server_socket_server_metrics_connection_accept_rate gauge
kafka_server_socket_server_metrics_connection_accept_rate{listener="PLAINTEXT",ip=""} 3.0
kafka_server_socket_server_metrics_connection_accept_rate{listener="",ip="127.0.0.1"} 3.0
# TYPE kafka_server_socket_server_metrics_connection_accept_throttle_time gauge
kafka_server_socket_server_metrics_connection_accept_throttle_time{listener="PLAINTEXT"} NaN
"""


def live(store: SqliteStore, **kwargs: Any) -> LiveMetrics:
    return LiveMetrics(["http://gw:1"], Admin(store).index, **kwargs)


def test_rates_meet_the_stores_quotas_most_throttled_first(store: SqliteStore) -> None:
    m = live(store)
    m.ingest(m.gateways["http://gw:1"], SCRAPE, 1000.0)
    rows = m.entity_rows()
    first = rows[0]
    assert (first["quota_type"], first["user"], first["rate"], first["throttle_time_ms"]) == ("produce", "alice",
                                                                                          2.5e6, 412.5)
    # quotaLimit(user=alice): the user entity's 2 MB/s (the gateway holds the same quota-id to the same value)
    assert first["quota"] == 2e6 and first["quota_entity"] == {"user": "alice"} and first["throttled"]
    by_user = {(r["user"], r["client_id"]): r for r in rows}
    spaces = by_user[("user%20with%20spaces", "")]
    assert spaces["user_name"] == "user with spaces" and spaces["quota"] == 1e6  # <default> user
    assert by_user[("", "batch-loader")]["quota"] == 1e7
    bob = by_user[("bob", "cli")]
    assert bob["key"] == "request_percentage" and bob["quota"] == 50.0 and bob["usage"] == 0.25
    conns = {(c["metric"], c["labels"]): c["value"] for c in m.connection_rows()}
    assert conns[("connection_accept_rate", "listener=PLAINTEXT")] == 3.0
    assert conns[("connection_accept_rate", "ip=127.0.0.1")] == 3.0
    assert conns[("connection_accept_throttle_time", "listener=PLAINTEXT")] == 0.0  # NaN: nothing throttled


def test_history_follows_quota_changes_and_is_bounded(store: SqliteStore) -> None:
    m = live(store, history=3)
    gw = m.gateways["http://gw:1"]
    for i in range(5):
        if i == 3:
            Admin(store).alter([Alteration.of(QuotaEntity(user="alice"), {"producer_byte_rate": 3e6})])
        m.ingest(gw, SCRAPE, 1000.0 + i)
    h = m.history_of("http://gw:1|produce|alice|")
    assert h is not None
    assert h["t"] == [1002.0, 1003.0, 1004.0]
    assert h["quota"] == [2e6, 3e6, 3e6]
    assert h["throttle_ms"] == [412.5] * 3
    assert m.history_of("http://gw:1|produce|nobody|") is None


def test_series_per_gateway_are_bounded(store: SqliteStore) -> None:
    m = live(store, max_series=4)
    gw = m.gateways["http://gw:1"]
    m.ingest(gw, SCRAPE, 1.0)
    assert len(gw.entities) + len(gw.connections) == 4
    assert gw.dropped_series == 3  # 4 quota-ids + 3 connection series seen, 4 kept
    snap = m.snapshot()
    assert snap["gateways"][0]["dropped_series"] == gw.dropped_series



def test_series_a_gateway_stopped_exporting_make_room_once_their_history_has_passed(store: SqliteStore) -> None:
    m = live(store, max_series=4, history=10, interval_s=1.0)
    gw = m.gateways["http://gw:1"]
    m.ingest(gw, SCRAPE, 0.0)
    newcomer = "# TYPE kafka_server_produce_byte_rate gauge\n" \
               'kafka_server_produce_byte_rate{user="dave",client_id=""} 5.0\n'
    m.ingest(gw, newcomer, 5.0)  # the old series are still within their 10 s of history: full, dave dropped
    assert gw.dropped_series == 4 and ("http://gw:1", "produce", "dave", "") not in gw.entities
    m.ingest(gw, newcomer, 11.0)  # 11 s since the old series were last exported: forgotten, dave kept
    assert list(gw.entities) == [("http://gw:1", "produce", "dave", "")] and not gw.connections
    assert [r["user"] for r in m.entity_rows()] == ["dave"]


def test_an_unreachable_gateway_is_reported_and_the_others_still_scraped(store: SqliteStore) -> None:
    import asyncio

    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.url.host == "up":
            return httpx2.Response(200, text=SCRAPE)
        raise httpx2.ConnectError("connection refused", request=request)

    index_threads: list[int] = []

    def index() -> QuotaIndex:  # rebuilding it reads the whole store: never on the event loop's thread
        index_threads.append(threading.get_ident())
        return Admin(store).index()

    m = LiveMetrics(["http://up:1", "http://down:1"], index)

    async def once() -> None:
        async with httpx2.AsyncClient(transport=httpx2.MockTransport(handler)) as client:
            await m.scrape_once(client)

    asyncio.run(once())
    assert index_threads and threading.get_ident() not in index_threads  # asyncio.run's loop runs on this thread
    states = {g["url"]: g for g in m.snapshot()["gateways"]}
    assert states["http://up:1"]["ok"] and states["http://up:1"]["series"] > 0
    assert not states["http://down:1"]["ok"] and "connection refused" in states["http://down:1"]["error"]


def test_api_live_without_gateways(client: TestClient) -> None:
    doc = client.get("/api/live").json()
    assert doc["gateways"] == [] and doc["entities"] == [] and doc["top"] == []
    assert client.get("/api/live/history", params={"id": "x|y|z|w"}).status_code == 404


# -- a real gateway ------------------------------------------------------------------------------------------------

QUOTA = 200_000.0  # producer_byte_rate of the throttled client, bytes/s
VALUE = b"v" * 8_000


def _produce(bootstrap: str, client_id: str, stop: threading.Event) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                         "queue.buffering.max.kbytes": 1024, "log_level": 0})
    topic = f"live-{uuid.uuid4().hex[:8]}"
    while not stop.is_set():
        try:
            producer.produce(topic, VALUE)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.purge()
    producer.flush(5)


@pytest.fixture
def throttled_gateway(gateway_factory: GatewayFactory, tmp_path: Path) -> Iterator[tuple[Any, Path]]:  # noqa: F811
    store_path = tmp_path / "live.db"
    with SqliteStore(store_path) as s:
        Admin(s).alter([Alteration.of(QuotaEntity(client_id="hog"), {"producer_byte_rate": QUOTA})])
    gw = gateway_factory(metrics_port=0, store=store_path)
    stop = threading.Event()
    producer = threading.Thread(target=_produce, args=(gw.bootstrap, "hog", stop), daemon=True)
    producer.start()
    try:
        yield gw, store_path
    finally:
        stop.set()
        producer.join(20)


@pytest.mark.broker
def test_live_page_shows_a_throttled_client_of_a_real_gateway(
    throttled_gateway: tuple[Any, Path], tmp_path: Path
) -> None:
    gw, store_path = throttled_gateway
    store = SqliteStore(store_path)
    try:
        app = create_app(store, ConsoleConfig(gateways=[gw.http_url], read_only=True, scrape_interval_s=0.5))
        with serve(app) as url, browser() as context:
            page = context.new_page()
            page.goto(f"{url}/live")
            # the producer outruns its quota within seconds; the gateway throttles it and exports the throttle time
            page.wait_for_selector("#entity-table tr.throttled", timeout=45_000)
            row = page.locator("#entity-table tr.throttled").first.inner_text().split("\t")
            assert row[1:4] == ["produce", "—", "hog"]
            assert row[5] == "200.0 k"  # the store's quota for client-id hog, as the gateway enforces it
            supplier = page.locator("#entity-table tr.throttled a").first
            assert supplier.get_attribute("title") == "client-id=hog"  # links to the entity that supplies it
            page.wait_for_selector("#top-charts .chart-box .uplot")
            assert "client-id=hog" in page.locator("#top-charts .chart-box").first.inner_text()
            page.locator("#entity-table tr.throttled td").first.click()  # any quota-id: its own chart
            page.wait_for_selector("#picked-chart .uplot")
            assert "client-id=hog" in page.inner_text("#picked-chart")
            status = page.inner_text("#live-status")
            expect(page.locator("#live-status")).not_to_have_text(status, timeout=20_000)  # refreshed (no eval: CSP)
            time.sleep(2)  # a few more scrapes for the chart
            screenshot(page, tmp_path, "live")
            doc = httpx2.get(f"{url}/api/live").json()
        hog = next(r for r in doc["entities"] if r["client_id"] == "hog" and r["quota_type"] == "produce")
        assert hog["quota"] == QUOTA and hog["throttle_time_ms"] > 0
        assert doc["gateways"][0]["ok"]
        assert any(c["metric"].endswith("accept_rate") for c in doc["connections"])
        history = doc["top"][0]["history"]
        assert len(history["t"]) >= 3 and all(q == QUOTA for q in history["quota"])
    finally:
        store.close()


@pytest.mark.broker
def test_a_running_shadow_is_scraped_from_a_real_gateway_beside_live(gateway_factory: GatewayFactory,  # noqa: F811
                                                                      tmp_path: Path) -> None:
    """Issue 36: a shadow set started on a running gateway shows in the console within seconds, per quota-id, as
    the gateway exports it: the producer the shadow would throttle, with no live throttle beside it."""
    from quotaflow.admin import shadow as shadow_admin

    store_path = tmp_path / "shadow-live.db"
    with SqliteStore(store_path) as s:
        Admin(s).alter([Alteration.of(QuotaEntity(client_id="hog"), {"producer_byte_rate": 100 * QUOTA})])
    gw = gateway_factory(metrics_port=0, store=store_path)
    stop = threading.Event()
    producer = threading.Thread(target=_produce, args=(gw.bootstrap, "hog", stop), daemon=True)
    producer.start()
    store = SqliteStore(store_path)
    try:
        started = shadow_admin.start(store, [Alteration.of(QuotaEntity(client_id="hog"),
                                                           {"producer_byte_rate": QUOTA / 4})], "tight hog", "test")
        app = create_app(store, ConsoleConfig(gateways=[gw.http_url], read_only=True, scrape_interval_s=0.5))
        with serve(app) as url:
            deadline = time.monotonic() + 45
            while True:
                doc = httpx2.get(f"{url}/api/shadow").json()
                hog = [r for r in doc["entities"] if r["client_id"] == "hog" and r["quota_type"] == "produce"]
                if hog and hog[0]["shadow_throttle_ms"] > 0:
                    break
                assert time.monotonic() < deadline, doc
                time.sleep(0.5)
        assert doc["shadow"]["id"] == started.id and doc["shadow"]["name"] == "tight hog"
        assert hog[0]["shadow_id"] == str(started.id) and hog[0]["live_throttle_ms"] == 0
        assert hog[0]["shadow_throttled_requests"] > 0, hog  # the requests the shadow would have throttled
        assert [(c["key"], c["enforced"], c["shadow"]) for c in doc["changes"]] == [
            ("producer_byte_rate", 100 * QUOTA, QUOTA / 4)]
    finally:
        stop.set()
        producer.join(20)
        store.close()
