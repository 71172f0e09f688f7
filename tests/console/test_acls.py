"""The console's ACL page and ``/api/acls``: list with Kafka's filters, add / remove for admins only (same-origin
JSON, the Quotas API's rules), Kafka's validation messages, and the decision with the ACL behind it, agreeing with
``quotaflow acls``."""

from __future__ import annotations

from click.testing import CliRunner
from starlette.testclient import TestClient

from quotaflow.cli.main import cli
from quotaflow.store.sqlite import SqliteStore

from .conftest import ADMIN, OPERATOR

READ_T = {"resource_type": "TOPIC", "name": "orders", "pattern_type": "LITERAL", "principal": "User:bob",
          "host": "*", "operation": "READ", "permission_type": "ALLOW"}
DENY_PAY = {"resource_type": "TOPIC", "name": "pay-", "pattern_type": "PREFIXED", "principal": "User:*",
            "host": "*", "operation": "ALL", "permission_type": "DENY"}


def test_admin_adds_lists_and_removes(client: TestClient, store: SqliteStore) -> None:
    r = client.post("/api/acls", json={"add": [READ_T, DENY_PAY]}, auth=ADMIN)
    assert r.status_code == 200, r.text
    assert client.get("/api/acls").json() == [READ_T, DENY_PAY]
    # Kafka's filters: MATCH on a name finds the prefixed pattern that applies to it
    assert client.get("/api/acls", params={"resource_type": "TOPIC", "name": "pay-eu",
                                           "pattern_type": "MATCH"}).json() == [DENY_PAY]
    listed = CliRunner().invoke(cli, ["acls", "--store", str(store.path), "--list"])
    assert "name=pay-, patternType=PREFIXED" in listed.output and "principal=User:bob" in listed.output
    page = client.get("/acls")
    assert page.status_code == 200 and "User:bob" in page.text and 'id="acl-table"' in page.text
    r = client.post("/api/acls", json={"remove": [READ_T]}, auth=ADMIN)
    assert r.json() == {"removed": [READ_T]}
    assert client.get("/api/acls").json() == [DENY_PAY]


def test_writes_need_an_admin_same_origin_json(client: TestClient) -> None:
    assert client.post("/api/acls", json={"add": [READ_T]}).status_code == 401
    assert client.post("/api/acls", json={"add": [READ_T]}, auth=OPERATOR).status_code == 403
    r = client.post("/api/acls", json={"add": [READ_T]}, auth=ADMIN, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403
    r = client.post("/api/acls", content=b"add=1", auth=ADMIN,
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 400
    assert client.get("/api/acls").json() == []


def test_kafkas_validation_messages(client: TestClient) -> None:
    bad = dict(READ_T, resource_type="CLUSTER", name="other")
    r = client.post("/api/acls", json={"add": [bad]}, auth=ADMIN)
    assert r.status_code == 400
    assert r.json()["error"] == {"code": 42, "name": "INVALID_REQUEST",
                                 "message": "The only valid name for the CLUSTER resource is kafka-cluster"}
    r = client.post("/api/acls", json={"add": [dict(READ_T, operation="FLY")]}, auth=ADMIN)
    assert r.status_code == 400 and r.json()["error"]["message"] == "Invalid operation FLY"
    assert client.get("/api/acls").json() == []


def test_decision_names_the_acl(client: TestClient) -> None:
    client.post("/api/acls", json={"add": [READ_T, DENY_PAY]}, auth=ADMIN)
    q = {"principal": "User:bob", "host": "10.0.0.1", "operation": "READ", "resource_type": "TOPIC"}
    allowed = client.get("/api/acls/authorize", params={**q, "name": "orders"}).json()
    assert allowed["allowed"] and allowed["acl"] == READ_T
    denied = client.get("/api/acls/authorize", params={**q, "name": "pay-eu"}).json()
    assert not denied["allowed"] and denied["acl"] == DENY_PAY
    # the console's admin principals are super users
    su = client.get("/api/acls/authorize", params={**q, "principal": "User:admin", "name": "pay-eu"}).json()
    assert su["allowed"] and su["rule"] == "SuperUser"
    asked = {"check": "1", **{f"check_{k}": v for k, v in q.items()}, "check_name": "pay-eu"}
    page = client.get("/acls", params=asked)
    assert 'id="acl-verdict"' in page.text and "DENIED" in page.text
