"""The console with the model beyond Kafka's (issue 20): a client-id-prefix filter and edit, ranges and prefixes on
the resolve page, each as the CLI answers it."""

from __future__ import annotations

from starlette.testclient import TestClient

from quotaflow.store.sqlite import SqliteStore

from .conftest import ADMIN
from .test_api import cli_json, post


def test_prefix_and_range_edit_filter_and_resolve(client: TestClient, store: SqliteStore) -> None:
    # consumer_byte_rate: no user-level entity of the fixture holds it, so the prefix is what applies
    for entity, ops in (({"client-id-prefix": "etl-"}, [{"key": "consumer_byte_rate", "value": 100_000}]),
                        ({"ip": "10.1.0.0/16"}, [{"key": "connection_creation_rate", "value": 5}])):
        r = post(client, {"entity": entity, "ops": ops}, auth=ADMIN)
        assert r.status_code == 200, r.text  # type: ignore[attr-defined]
    bad = post(client, {"entity": {"client-id-prefix": None}, "ops": [{"key": "producer_byte_rate", "value": 1}]})
    assert bad.status_code == 400  # type: ignore[attr-defined]
    assert "client-id-prefix has no default entity" in bad.json()["error"]["message"]  # type: ignore[attr-defined]
    found = client.get("/api/quotas", params={"client-id-prefix_match": "any"}).json()
    assert found == cli_json(store, "--describe", "--any", "client-id-prefix")
    assert [d["entity"] for d in found] == [{"client-id-prefix": "etl-"}]
    doc = client.get("/api/resolve", params={"user": "nobody", "client-id": "etl-7"}).json()
    produce = doc["quotas"]["consumer_byte_rate"]
    assert (produce["value"], produce["level"]) == (100_000.0, 9)
    assert produce["quota_id"] == {"user": "<client-id-prefix>", "client-id": "etl-"}
    page = client.get("/resolve", params={"user": "nobody", "client-id": "etl-7"}).text
    assert "client-id-prefix" in page and "every client whose client-id starts with etl-" in page
    # issue 35: the quota-id as text, escaped as HTML, not as JSON inside HTML (\u003cclient-id-prefix\u003e)
    assert "quota-id {user=&lt;client-id-prefix&gt;, client-id=etl-}" in page and "\\u003c" not in page
    ip_page = client.get("/resolve", params={"ip": "10.1.2.3"}).text
    assert "ip range (CIDR)" in ip_page
    quotas = client.get("/quotas").text
    # issue 35: a prefix's link opened an empty form; it names a client of the prefix (the prefix as its id, an
    # empty user) and shows its resolution
    assert 'href="/resolve?user=&amp;client-id=etl-"' in quotas and 'href="/resolve?ip=10.1.0.0"' in quotas
    linked = client.get("/resolve", params={"user": "", "client-id": "etl-"}).text
    assert "resolve-table" in linked and "every client whose client-id starts with etl-" in linked
