"""@platformatic/kafka (Node) manages quotas through the gateway: it sees exactly what the store holds."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from quotaflow.admin import Admin
from quotaflow.core.filters import QuotaFilter
from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.store import open_store

from .conftest import GatewayFactory

pytestmark = pytest.mark.broker

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).parent / "node" / "quota_admin.mjs"


def node_admin(bootstrap: str, steps: list[dict[str, Any]], sasl: dict[str, str] | None = None) -> list[Any]:
    if shutil.which("node") is None or not (ROOT / "node_modules" / "@platformatic" / "kafka").is_dir():
        pytest.skip("node or node_modules/@platformatic/kafka is not installed (make setup)")
    spec = {"bootstrap": bootstrap, "sasl": sasl, "steps": steps}
    done = subprocess.run(
        ["node", str(SCRIPT), json.dumps(spec)], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    results: list[Any] = json.loads(done.stdout)["results"]
    return results


def entity(kind: str, name: str | None) -> dict[str, Any]:
    return {"entityType": kind, "entityName": name}


def op(key: str, value: float | None) -> dict[str, Any]:
    return {"key": key, "remove": True} if value is None else {"key": key, "value": value, "remove": False}


def as_store_view(entries: list[dict[str, Any]]) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    return {
        tuple(sorted((e["entityType"], e["entityName"]) for e in entry["entity"])): {
            v["key"]: v["value"] for v in entry["values"]
        }
        for entry in entries
    }


def test_node_alters_and_describes_exactly_what_the_store_holds(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(admin_principals=frozenset({"admin"}))
    qs = open_store(gw.store_path)
    qs.put_credential(hash_password("admin", "admin-secret", iterations=1000))
    qs.put_credential(hash_password("mallory", "m-secret", iterations=1000))
    qs.close()
    admin_login = {"username": "admin", "password": "admin-secret"}
    steps: list[dict[str, Any]] = [
        {
            "alter": [
                {
                    "entities": [entity("user", "alice")],
                    "ops": [op("producer_byte_rate", 1048576), op("consumer_byte_rate", 2e6)],
                },
                {
                    "entities": [entity("user", "alice"), entity("client-id", "app")],
                    "ops": [op("request_percentage", 25)],
                },
                {"entities": [entity("client-id", None)], "ops": [op("producer_byte_rate", 4096)]},
                {"entities": [entity("ip", "127.0.0.3")], "ops": [op("connection_creation_rate", 5)]},
            ]
        },
        {"alter": [{"entities": [entity("user", "alice")], "ops": [op("consumer_byte_rate", None)]}]},
        {"alter": [{"entities": [entity("user", "bob")], "ops": [op("producer_byte_rate", -1)]}]},
        {"describe": [{"entityType": "user", "matchType": 2}]},
        {"describe": [{"entityType": "client-id", "matchType": 1}], "strict": True},
        {"describe": [{"entityType": "ip", "matchType": 0, "match": "127.0.0.3"}]},
    ]
    results = node_admin(gw.bootstrap, steps, admin_login)
    assert [len(r["ok"]) for r in results[:2]] == [4, 1]
    assert all(e["errorCode"] == 0 for r in results[:2] for e in r["ok"])
    assert results[2] == {
        "error": [{"id": "INVALID_REQUEST", "code": 42, "message": "Quota producer_byte_rate must be greater than 0"}]
    }
    truth = Admin(open_store(gw.store_path))
    try:
        stored = {tuple(sorted(d.entity.to_wire().items())): dict(d.values) for d in truth.describe(QuotaFilter())}
    finally:
        truth.close()
    assert stored == {
        (("user", "alice"),): {"producer_byte_rate": 1048576.0},
        (("client-id", "app"), ("user", "alice")): {"request_percentage": 25.0},
        (("client-id", None),): {"producer_byte_rate": 4096.0},
        (("ip", "127.0.0.3"),): {"connection_creation_rate": 5.0},
    }
    users_any, default_client_only, one_ip = (as_store_view(r["ok"]) for r in results[3:6])
    assert users_any == {k: v for k, v in stored.items() if any(t == "user" for t, _ in k)}
    assert default_client_only == {(("client-id", None),): {"producer_byte_rate": 4096.0}}
    assert one_ip == {(("ip", "127.0.0.3"),): {"connection_creation_rate": 5.0}}


def test_node_without_admin_rights_is_refused(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(admin_principals=frozenset({"admin"}))
    qs = open_store(gw.store_path)
    qs.put_credential(hash_password("mallory", "m-secret", iterations=1000))
    qs.close()
    steps: list[dict[str, Any]] = [
        {"alter": [{"entities": [entity("user", "mallory")], "ops": [op("producer_byte_rate", 1e12)]}]},
        {"describe": [{"entityType": "user", "matchType": 2}]},
    ]
    for login in ({"username": "mallory", "password": "m-secret"}, None):  # SASL non-admin, and ANONYMOUS
        results = node_admin(gw.bootstrap, steps, login)
        for r in results:
            assert [(e["id"], e["code"]) for e in r["error"]] == [("CLUSTER_AUTHORIZATION_FAILED", 31)]
    truth = Admin(open_store(gw.store_path))
    try:
        assert truth.describe(QuotaFilter()) == []
    finally:
        truth.close()
