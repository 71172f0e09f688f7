"""The API handler table: each API's hooks, and the quota decisions it records for the event log."""

from __future__ import annotations

from pathlib import Path

from kafka.protocol.api_key import ApiKey

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import QuotaEntity
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.data.addresses import REWRITTEN_APIS
from quotaflow.gateway.data.api_handlers import DEFAULT, HANDLERS, LOCAL_APIS
from quotaflow.gateway.data.enforcement import Enforcement, RequestDecisions
from quotaflow.gateway.data.pending import Pending
from quotaflow.gateway.wire.protocol import RequestHeader
from quotaflow.store import open_store

NOW_MS = 1_700_000_000_000


def _enforcement(tmp_path: Path, values: dict[str, float]) -> Enforcement:
    with open_store(tmp_path / "q.db") as store:
        assert all(r.ok for r in Admin(store).alter([Alteration.of(QuotaEntity(client_id="c"), values)]))
        enforcement = Enforcement(GatewayConfig(quota_window_num=2, quota_window_size_seconds=1))
        enforcement.load(store.snapshot())
    return enforcement


def _pending(key: int, size: int) -> Pending:
    return Pending(RequestHeader(key, 7, 1, "c", 0), size, NOW_MS)


def test_every_local_api_has_a_local_answer_and_address_apis_a_rewrite() -> None:
    assert all(HANDLERS[key].local is not None for key in LOCAL_APIS | {ApiKey.ApiVersions})
    assert all(HANDLERS[key].response is not None for key in REWRITTEN_APIS)
    assert HANDLERS.get(ApiKey.ListOffsets, DEFAULT) is DEFAULT


def test_produce_over_its_byte_rate_records_the_produce_throttle(tmp_path: Path) -> None:
    enforcement = _enforcement(tmp_path, {"producer_byte_rate": 10_000.0})
    decide = HANDLERS[ApiKey.Produce].decide
    first = decide(enforcement, _pending(ApiKey.Produce, 5_000), b"", "ANONYMOUS", "c", 0, NOW_MS)
    assert first == RequestDecisions()  # within the window: nothing throttled
    second = decide(enforcement, _pending(ApiKey.Produce, 200_000), b"", "ANONYMOUS", "c", 0, NOW_MS + 10)
    assert second.throttle_ms_produce > 0
    assert second.throttle_ms == max(second.throttle_ms_produce, second.throttle_ms_request)
    assert second.throttle_ms_fetch == 0


def test_a_fetch_answered_locally_meets_only_the_request_quota(tmp_path: Path) -> None:
    enforcement = _enforcement(tmp_path, {"consumer_byte_rate": 1.0, "request_percentage": 0.01})
    pending = _pending(ApiKey.Fetch, 100)  # no upstream future: the request quota alone
    decisions = HANDLERS[ApiKey.Fetch].decide(enforcement, pending, b"x" * 1_000_000, "ANONYMOUS", "c",
                                              50_000_000, NOW_MS)
    assert decisions.throttle_ms_fetch == 0
    assert decisions.throttle_ms_request > 0 and decisions.throttle_ms == decisions.throttle_ms_request

    forwarded = _pending(ApiKey.Fetch, 100)
    forwarded.forwarded = True
    decisions = HANDLERS[ApiKey.Fetch].decide(enforcement, forwarded, b"x" * 1_000_000, "ANONYMOUS", "c", 0, NOW_MS)
    assert decisions.throttle_ms_fetch > 0
