"""The JSON documents of describe, alter and resolve results: what the CLI prints and the gateway serves."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from quotaflow.admin import Admin, Alteration, AlterResult, DescribedEntity
from quotaflow.admin.codec import alter_to_json, describe_to_json, resolution_from_json, resolution_to_json
from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.errors import ApiError
from quotaflow.store import open_store


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[Admin]:
    admin = Admin(open_store(tmp_path / "q.db"))
    admin.alter(
        [
            Alteration.of(QuotaEntity(user="alice"), {"producer_byte_rate": 100.0}),
            Alteration.of(QuotaEntity(user=DEFAULT, client_id=DEFAULT), {"producer_byte_rate": 50.0}),
            Alteration.of(QuotaEntity(user="alice", client_id="c"), {"request_percentage": 25.0}),
            Alteration.of(QuotaEntity(ip=DEFAULT), {"connection_creation_rate": 3.0}),
        ]
    )
    yield admin
    admin.close()


def test_resolution_round_trips_through_json_text(admin: Admin) -> None:
    """What the gateway serves at /resolve reads back as the same Resolution, through real JSON text."""
    try:
        for resolution in (admin.resolve("alice", "c"), admin.resolve("bob", ""), admin.resolve_ip("10.0.0.1")):
            assert resolution_from_json(json.loads(json.dumps(resolution_to_json(resolution)))) == resolution
    finally:
        admin.close()


def test_resolution_document_names_the_supplier_and_what_it_overrides(admin: Admin) -> None:
    try:
        doc = resolution_to_json(admin.resolve("alice", "c"))
    finally:
        admin.close()
    assert doc["entity"] == {"user": "alice", "client-id": "c"}
    quotas = doc["quotas"]
    assert isinstance(quotas, dict) and list(quotas) == sorted(quotas)
    produce = quotas["producer_byte_rate"]
    assert produce["value"] == 100.0 and produce["entity"] == {"user": "alice"} and not produce["unlimited"]
    assert produce["level"] == 3  # /users/alice, over level 5 /users/<default>/clients/<default>
    assert produce["overridden"] == [{"level": 5, "entity": {"user": None, "client-id": None}, "value": 50.0}]
    assert quotas["consumer_byte_rate"]["unlimited"] and quotas["consumer_byte_rate"]["entity"] is None


@pytest.mark.parametrize("broken", [{"entity": {"user": "x"}}, {"entity": {"user": "x"}, "seq": "n", "quotas": {}}])
def test_a_malformed_resolution_document_raises(broken: dict[str, object]) -> None:
    with pytest.raises((KeyError, ValueError)):
        resolution_from_json(broken)


def test_describe_and_alter_documents() -> None:
    found = [DescribedEntity(QuotaEntity(user="u", client_id=DEFAULT), {"b": 2.0, "a": 1.0})]
    assert describe_to_json(found) == [{"entity": {"user": "u", "client-id": None}, "values": {"a": 1.0, "b": 2.0}}]
    assert list(describe_to_json(found)[0]["values"]) == ["a", "b"]  # type: ignore[call-overload]
    results = [AlterResult({"user": "u"}, ApiError()), AlterResult({"user": "v"}, ApiError(42, "bad entity"))]
    assert alter_to_json(results) == [
        {"entity": {"user": "u"}, "error": None},
        {"entity": {"user": "v"}, "error": {"code": 42, "name": "INVALID_REQUEST", "message": "bad entity"}},
    ]
