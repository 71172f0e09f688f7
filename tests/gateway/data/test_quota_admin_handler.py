"""The 48/49 handler without a network: kafka-python request objects in, wire-encodable responses out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

from quotaflow.admin import Admin
from quotaflow.gateway.data.quota_admin import QuotaAdminHandler
from quotaflow.gateway.wire import protocol
from quotaflow.store import open_store


@pytest.fixture
def handler(tmp_path: Path) -> Iterator[QuotaAdminHandler]:
    with open_store(tmp_path / "q.db") as store:
        yield QuotaAdminHandler(Admin(store), None)


def _entry(entity: list[tuple[str, str | None]], ops: list[tuple[str, float, bool]]) -> Any:
    e = AlterClientQuotasRequest.EntryData
    return e(entity=[e.EntityData(entity_type=t, entity_name=n) for t, n in entity],
             ops=[e.OpData(key=k, value=v, remove=r) for k, v, r in ops])


def _roundtrip(response: Any, cls: Any, version: int) -> Any:
    """Encode as the gateway sends it and decode as a client would."""
    return cls.decode(protocol.encode_response(response, version, 1)[4:], version=version, header=True)


@pytest.mark.parametrize("version", [0, 1])
def test_alter_results_per_entity(handler: QuotaAdminHandler, version: int) -> None:
    request = AlterClientQuotasRequest[version](validate_only=False, entries=[
        _entry([("user", "alice")], [("producer_byte_rate", 1000.0, False)]),
        _entry([("user", None), ("client-id", "c")], [("request_percentage", 12.5, False)]),
        _entry([("ip", "1.2.3.4"), ("user", "u")], [("connection_creation_rate", 5.0, False)]),
        _entry([("user", "alice")], [("consumer_byte_rate", 1.0, False)]),  # duplicate entity
    ])
    response = _roundtrip(handler.alter(version, request, True), AlterClientQuotasResponse, version)
    got = [(r.error_code, r.error_message, {(e.entity_type, e.entity_name) for e in r.entity})
           for r in response.entries]
    assert got == [
        (42, "Ignoring duplicate entity ClientQuotaEntity(entries={user=alice})", {("user", "alice")}),
        (0, None, {("user", None), ("client-id", "c")}),
        (42, "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
         {("ip", "1.2.3.4"), ("user", "u")}),
    ]
    # the first occurrence of the duplicate entity was still applied (ClientQuotaControlManager)
    described = handler.describe(version, DescribeClientQuotasRequest[version](components=[], strict=False), True)
    values = {tuple(sorted((e.entity_type, e.entity_name or "") for e in d.entity)): {v.key: v.value for v in d.values}
              for d in _roundtrip(described, DescribeClientQuotasResponse, version).entries}
    assert values == {(("user", "alice"),): {"producer_byte_rate": 1000.0},
                      (("client-id", "c"), ("user", "")): {"request_percentage": 12.5}}


@pytest.mark.parametrize(
    ("components", "code", "message"),
    [
        ([("", 0, "x")], 42, "Invalid empty entity type."),
        ([("group", 2, None)], 35, "Unsupported entity type group"),
        ([("user", 0, None)], 42, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
        ([("ip", 2, None), ("user", 2, None)], 42, "Invalid entity filter component combination. IP filter "
                                                   "component should not be used with user or clientId filter "
                                                   "component."),
    ],
)
def test_describe_filter_errors_fail_the_whole_request(handler: QuotaAdminHandler,
                                                       components: list[tuple[str, int, str | None]],
                                                       code: int, message: str) -> None:
    c = DescribeClientQuotasRequest.ComponentData
    request = DescribeClientQuotasRequest[1](
        components=[c(entity_type=t, match_type=m, match=n) for t, m, n in components], strict=False)
    response = _roundtrip(handler.describe(1, request, True), DescribeClientQuotasResponse, 1)
    assert (response.error_code, response.error_message, response.entries) == (code, message, None)


def test_validate_only_writes_nothing(handler: QuotaAdminHandler) -> None:
    request = AlterClientQuotasRequest[1](validate_only=True, entries=[
        _entry([("client-id", "c")], [("producer_byte_rate", 10.0, False)])])
    assert [r.error_code for r in handler.alter(1, request, True).entries] == [0]
    assert handler.admin.store.snapshot().entities == {}
