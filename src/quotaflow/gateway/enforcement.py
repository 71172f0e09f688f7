"""Quota enforcement at the gateway (placeholder until the engine's ClientQuotaManager lands)."""

from __future__ import annotations

from collections.abc import Sequence

from quotaflow.engine.exempt import EXEMPT_THROTTLE_API_KEYS
from quotaflow.gateway.config import GatewayConfig
from quotaflow.store.base import Change, Snapshot


class Enforcement:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config

    def load(self, snapshot: Snapshot) -> None:
        pass

    def apply_changes(self, changes: Sequence[Change]) -> None:
        pass

    def produce(self, principal: str, client_id: str | None, size: int, now_ms: int) -> int:
        return 0

    def fetch(self, principal: str, client_id: str | None, size: int, now_ms: int) -> int:
        return 0

    def unrecord_fetch(self, principal: str, client_id: str | None, size: int, now_ms: int) -> None:
        pass

    def request(self, principal: str, client_id: str | None, thread_ns: int, now_ms: int) -> int:
        return 0

    def record_exempt(self, thread_ns: int, now_ms: int) -> None:
        pass

    def is_exempt(self, api_key: int) -> bool:
        return api_key in EXEMPT_THROTTLE_API_KEYS
