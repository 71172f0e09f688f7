"""The running shadow set on the Live page's API: its changes (enforced -> shadow), live vs shadow throttling from the
gateways' /metrics, and promote / stop / rollback by an admin only, recorded under the signed-in principal."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from quotaflow.admin import Admin, Alteration
from quotaflow.admin import shadow as shadow_admin
from quotaflow.console import ConsoleConfig, create_app
from quotaflow.console.live import LiveMetrics
from quotaflow.core.entities import QuotaEntity
from quotaflow.store.sqlite import SqliteStore

from .conftest import ADMIN, OPERATOR

PAGE = {"Content-Type": "application/json", "X-Quotaflow-Page": "live"}

# the gateway's /metrics while shadow set 7 runs (docs/metrics.md, Shadow quotas): ann's produce is throttled
# live and would be throttled longer under the shadow; bob's fetch only under the shadow; two brokers
SCRAPE = """# HELP kafka_server_produce_byte_rate byte-rate
# TYPE kafka_server_produce_byte_rate gauge
kafka_server_produce_byte_rate{broker="0",user="ann",client_id=""} 2500000.0
# TYPE kafka_server_produce_throttle_time gauge
kafka_server_produce_throttle_time{broker="0",user="ann",client_id=""} 250.0
# TYPE kafka_server_fetch_byte_rate gauge
kafka_server_fetch_byte_rate{broker="0",user="bob",client_id="c1"} 800000.0
# TYPE kafka_server_shadow_produce_byte_rate gauge
kafka_server_shadow_produce_byte_rate{broker="0",user="ann",client_id="",shadow_id="7"} 2500000.0
# TYPE kafka_server_shadow_produce_throttle_time gauge
kafka_server_shadow_produce_throttle_time{broker="0",user="ann",client_id="",shadow_id="7"} 900.0
# TYPE kafka_server_shadow_fetch_byte_rate gauge
kafka_server_shadow_fetch_byte_rate{broker="0",user="bob",client_id="c1",shadow_id="7"} 500000.0
kafka_server_shadow_fetch_byte_rate{broker="1",user="bob",client_id="c1",shadow_id="7"} 300000.0
# TYPE kafka_server_shadow_fetch_throttle_time gauge
kafka_server_shadow_fetch_throttle_time{broker="0",user="bob",client_id="c1",shadow_id="7"} 120.0
kafka_server_shadow_fetch_throttle_time{broker="1",user="bob",client_id="c1",shadow_id="7"} 80.0
# HELP kafka_server_shadow_throttled_requests_total requests the shadow would have throttled
# TYPE kafka_server_shadow_throttled_requests_total counter
kafka_server_shadow_throttled_requests_total{broker="0",quota_type="produce",user="ann",client_id="",shadow_id="7"} 40.0
kafka_server_shadow_throttled_requests_total{broker="0",quota_type="fetch",user="bob",client_id="c1",shadow_id="7"} 3.0
kafka_server_shadow_throttled_requests_total{broker="1",quota_type="fetch",user="bob",client_id="c1",shadow_id="7"} 2.0
# TYPE kafka_server_shadow_connections_total counter
kafka_server_shadow_connections_total{result="refused",listener="",shadow_id="7"} 4.0
"""


def test_shadow_families_beside_the_live_ones_and_bounded(store: SqliteStore) -> None:
    m = LiveMetrics(["http://gw:1"], Admin(store).index, history=3)
    gw = m.gateways["http://gw:1"]
    for i in range(5):
        m.ingest(gw, SCRAPE, 1000.0 + i)
    rows = {(r["quota_type"], r["user"]): r for r in m.shadow_rows(7)}
    alice, bob = rows[("produce", "ann")], rows[("fetch", "bob")]
    assert (alice["live_throttle_ms"], alice["shadow_throttle_ms"], alice["shadow_throttled_requests"]) == (
        250.0, 900.0, 40.0)
    # two brokers: the longest throttle, the counts and rates added up; bob is not throttled live
    assert (bob["live_throttle_ms"], bob["shadow_throttle_ms"], bob["shadow_throttled_requests"],
            bob["shadow_rate"]) == (0.0, 120.0, 5.0, 800000.0)
    assert alice["history"]["t"] == [1002.0, 1003.0, 1004.0]  # history points bound the memory
    assert alice["history"]["shadow_throttle_ms"] == [900.0] * 3
    assert m.shadow_rows(8) == []  # another set's series are not this one's
    conns = {(c["metric"], c["labels"]): c["value"] for c in m.connection_rows()}
    assert conns[("shadow_connections_total", "result=refused,shadow_id=7")] == 4.0
    # the shadow series count against max_series like every other
    small = LiveMetrics(["http://gw:1"], Admin(store).index, max_series=4)
    small.ingest(small.gateways["http://gw:1"], SCRAPE, 1000.0)
    assert len(small.shadow_rows(None)) < 2 and small.gateways["http://gw:1"].dropped_series > 0


@pytest.fixture
def shadowed(store: SqliteStore) -> SqliteStore:
    shadow_admin.start(store, [Alteration.of(QuotaEntity(user="alice"), {"producer_byte_rate": 3e6,
                                                                          "consumer_byte_rate": None}),
                               Alteration.of(QuotaEntity(user="bob"), {"consumer_byte_rate": 1e6})],
                       "lift alice", "carol")
    return store


def test_running_shadow_with_enforced_and_shadow_values(client: TestClient, shadowed: SqliteStore) -> None:
    doc = client.get("/api/shadow").json()
    s = doc["shadow"]
    assert (s["name"], s["started_by"], s["outcome"]) == ("lift alice", "carol", "running")
    assert abs(s["started_ms"] - time.time() * 1000) < 600_000
    changes = {(tuple(sorted(c["entity"].items())), c["key"]): (c["enforced"], c["shadow"]) for c in doc["changes"]}
    assert changes == {((("user", "alice"),), "producer_byte_rate"): (2e6, 3e6),
                       ((("user", "alice"),), "consumer_byte_rate"): (4e6, None),
                       ((("user", "bob"),), "consumer_byte_rate"): (None, 1e6)}
    assert doc["entities"] == [] and doc["last_promotion"] is None


def test_admin_promotes_as_itself_then_rolls_back(client: TestClient, shadowed: SqliteStore) -> None:
    sid = client.get("/api/shadow").json()["shadow"]["id"]
    before = time.time() * 1000
    r = client.post("/api/shadow/promote", json={"shadow_id": sid, "in_s": 2}, auth=ADMIN, headers=PAGE)
    assert r.status_code == 200, r.text
    p = r.json()["promotion"]
    assert (p["kind"], p["by"], p["shadow_id"]) == ("promote", "admin", sid)
    assert p["effective_ms"] >= before + 2000
    assert shadowed.get(QuotaEntity(user="alice")) == {"producer_byte_rate": 3e6}
    assert shadowed.get(QuotaEntity(user="bob")) == {"consumer_byte_rate": 1e6}
    doc = client.get("/api/shadow").json()
    assert doc["shadow"] is None and doc["last_promotion"]["by"] == "admin"
    # nothing left to promote: one line, 409
    again = client.post("/api/shadow/promote", json={"shadow_id": sid}, auth=ADMIN, headers=PAGE)
    assert again.status_code == 409 and "\n" not in again.json()["error"]["message"]
    r = client.post("/api/shadow/rollback", json={"in_s": 0}, auth=ADMIN, headers=PAGE)
    assert r.status_code == 200, r.text
    assert r.json()["promotion"]["kind"] == "rollback" and r.json()["promotion"]["by"] == "admin"
    assert shadowed.get(QuotaEntity(user="alice")) == {"producer_byte_rate": 2e6, "consumer_byte_rate": 4e6}
    assert shadowed.get(QuotaEntity(user="bob")) == {}


def test_stop_records_the_admin_and_refuses_a_replaced_set(client: TestClient, shadowed: SqliteStore) -> None:
    old = client.get("/api/shadow").json()["shadow"]["id"]
    shadow_admin.start(shadowed, [Alteration.of(QuotaEntity(user="alice"), {"producer_byte_rate": 9e6})],
                       "other", "dave")
    r = client.post("/api/shadow/promote", json={"shadow_id": old}, auth=ADMIN, headers=PAGE)
    assert r.status_code == 409 and "no longer the running one" in r.json()["error"]["message"]
    assert shadowed.get(QuotaEntity(user="alice"))["producer_byte_rate"] == 2e6  # nothing promoted
    new = client.get("/api/shadow").json()["shadow"]["id"]
    r = client.post("/api/shadow/stop", json={"shadow_id": new}, auth=ADMIN, headers=PAGE)
    assert r.status_code == 200, r.text
    assert (r.json()["shadow"]["outcome"], r.json()["shadow"]["ended_by"]) == ("stopped", "admin")
    assert shadow_admin.status(shadowed) is None


def test_bad_grace_is_refused_in_one_line(client: TestClient, shadowed: SqliteStore) -> None:
    sid = client.get("/api/shadow").json()["shadow"]["id"]
    for body in ({"shadow_id": sid, "in_s": -1}, {"shadow_id": sid, "in_s": "soon"}, {"in_s": 5}, [1]):
        r = client.post("/api/shadow/promote", json=body, auth=ADMIN, headers=PAGE)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["name"] == "INVALID_REQUEST"
    assert shadow_admin.status(shadowed) is not None


def test_only_an_admin_may_act(store: SqliteStore, shadowed: SqliteStore) -> None:
    app = create_app(store, ConsoleConfig(admins=frozenset({"User:admin"})))
    with TestClient(app) as c:
        sid = c.get("/api/shadow").json()["shadow"]["id"]
        body = {"shadow_id": sid}
        assert c.post("/api/shadow/promote", json=body, headers=PAGE).status_code == 401
        r = c.post("/api/shadow/promote", json=body, auth=OPERATOR, headers=PAGE)
        assert r.status_code == 403 and r.json()["error"]["name"] == "CLUSTER_AUTHORIZATION_FAILED"
        assert c.post("/api/shadow/stop", json=body, auth=OPERATOR, headers=PAGE).status_code == 403
        assert c.post("/api/shadow/rollback", json={}, auth=OPERATOR, headers=PAGE).status_code == 403
        # a foreign page, or a form post, is refused even for the admin
        foreign = c.post("/api/shadow/stop", json=body, auth=ADMIN, headers={**PAGE, "Origin": "http://evil.example"})
        assert foreign.status_code == 403
        form = c.post("/api/shadow/stop", content=b"shadow_id=1", auth=ADMIN,
                      headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert form.status_code == 400
        assert shadow_admin.status(shadowed) is not None
        # the page offers the buttons to the admin only
        assert 'id="shadow-promote"' in c.get("/live", auth=ADMIN).text
        assert 'id="shadow-promote"' not in c.get("/live", auth=OPERATOR).text
        assert 'id="shadow-promote"' not in c.get("/live").text
    with TestClient(create_app(store, ConsoleConfig(read_only=True))) as ro:
        r = ro.post("/api/shadow/stop", json={"shadow_id": sid}, auth=ADMIN, headers=PAGE)
        assert r.status_code == 403


def test_page_shows_the_shadow_beside_live_and_an_admin_promotes(shadowed: SqliteStore, tmp_path: Path) -> None:
    """In chromium: a gateway's /metrics (served over HTTP, scraped by the console) with the running set's families;
    the admin sees the set, its changes and live vs shadow throttling, confirms a promotion and sees when it takes
    effect; an operator sees no buttons and the API refuses them."""
    from playwright.sync_api import expect
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from quotaflow.testing.asgi import serve

    from .browser import browser, screenshot

    running = shadow_admin.status(shadowed)
    assert running is not None
    text = SCRAPE.replace('shadow_id="7"', f'shadow_id="{running.id}"')
    metrics = Starlette(routes=[Route("/metrics", lambda _r: PlainTextResponse(text))])
    with serve(metrics) as gw_url:
        app = create_app(shadowed, ConsoleConfig(gateways=[gw_url], admins=frozenset({"admin"}),
                                                 scrape_interval_s=0.5))
        with serve(app) as url:
            with browser(OPERATOR) as context:
                page = context.new_page()
                page.goto(f"{url}/login?next=/live")
                expect(page.locator("#shadow-name")).to_have_text("lift alice")
                assert page.locator("#shadow-promote").count() == 0
                assert page.locator("#shadow-rollback").count() == 0
                r = page.request.post(f"{url}/api/shadow/promote", data={"shadow_id": running.id},
                                      headers={"Content-Type": "application/json"})
                assert r.status == 403
            assert shadow_admin.status(shadowed) is not None
            with browser(ADMIN) as context:
                page = context.new_page()
                page.goto(f"{url}/login?next=/live")
                expect(page.locator("#shadow-by")).to_have_text("carol")
                changes = page.locator("#shadow-changes tbody").inner_text()
                assert "user=alice" in changes and "producer_byte_rate" in changes and "absent" in changes
                expect(page.locator("#shadow-entities tbody tr")).to_have_count(2)
                first = page.locator("#shadow-entities tbody tr").first.inner_text()
                assert "ann" in first and "900" in first and "250" in first  # live 250 ms vs shadow 900 ms
                expect(page.locator("#shadow-charts .chart-box")).to_have_count(2)
                expect(page.locator("#entity-table tbody tr").first).to_contain_text("ann")  # the live view beside
                screenshot(page, tmp_path, "live-shadow")
                expect(page.locator("#shadow-confirm")).to_be_hidden()  # promoting asks first
                page.click("#shadow-promote")
                expect(page.locator("#shadow-confirm")).to_be_visible()
                page.fill("#shadow-in", "3")
                expect(page.locator("#shadow-effective")).to_contain_text("every gateway switches at")
                page.click("#shadow-confirm-yes")
                expect(page.locator("#shadow-result.ok")).to_contain_text("by admin: takes effect at")
                expect(page.locator("#shadow-none")).to_be_visible()
                expect(page.locator("#shadow-last")).to_contain_text("Last promote")
                screenshot(page, tmp_path, "live-shadow-promoted")
    assert shadow_admin.status(shadowed) is None
    last = shadowed.promotions()[-1]
    assert (last.kind, last.by, last.shadow_id) == ("promote", "admin", running.id)
    assert shadowed.get(QuotaEntity(user="alice")) == {"producer_byte_rate": 3e6}
