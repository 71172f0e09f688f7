"""The console's state: one store, its admin and resolver, the write policy, the live scraper, the backtests root.

Handlers reach it through ``request.app.state.console`` (:func:`console_of`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

import quotaflow.console.backtests as bt
from quotaflow.admin import Admin, QuotaIndex, Resolution
from quotaflow.console import proposals
from quotaflow.console.access import DEFAULT_FAILED_RATE_PER_IP, Access, Principal
from quotaflow.console.live import DEFAULT_HISTORY, DEFAULT_INTERVAL_S, LiveMetrics
from quotaflow.core.errors import CommandError, SaslAuthenticationFailedError
from quotaflow.store.base import QuotaStore
from quotaflow.store.factory import store_identity


@dataclass(slots=True)
class ConsoleConfig:
    """What ``quotaflow console`` was started with."""

    gateways: Sequence[str] = ()
    backtests: Path | None = None
    read_only: bool = False
    admins: frozenset[str] | None = None
    scrape_interval_s: float = DEFAULT_INTERVAL_S
    history: int = DEFAULT_HISTORY
    # a failed sign-in is answered after this delay (Kafka's connection.failed.authentication.delay.ms, default 100)
    failed_authentication_delay_ms: int = 100
    # password checks per second per client IP for failing sign-ins, burst 3x (the gateway's
    # quotaflow.sasl.failed.authentication.rate.per.ip)
    failed_rate_per_ip: float = DEFAULT_FAILED_RATE_PER_IP


T = TypeVar("T")


class Console:
    """The app's state: one store, its admin, the write policy, the live scraper, where backtests are."""

    def __init__(self, store: QuotaStore, config: ConsoleConfig) -> None:
        self.store = store
        self.config = config
        self.admin = Admin(store)
        self.access = Access(store, read_only=config.read_only, admins=config.admins,
                             failed_rate_per_ip=config.failed_rate_per_ip)
        self._index: QuotaIndex | None = None
        self.live = LiveMetrics(
            config.gateways, self.index, interval_s=config.scrape_interval_s, history=config.history
        )

    def resolve(self, user: str, client_id: str) -> Resolution:
        return self.index().resolve(user, client_id)

    def resolve_ip(self, ip: str) -> Resolution:
        return self.index().resolve_ip(ip)

    def index(self) -> QuotaIndex:
        """The resolver over the current snapshot, rebuilt only when the store has changed since."""
        if self._index is None or self._index.seq != self.store.last_seq():
            self._index = self.admin.index()
        return self._index

    async def authenticate(self, check: Callable[[str | None, str], T], request: Request) -> T:
        """``check(authorization, client_ip)`` (an :class:`Access` method) off the event loop. A failed sign-in is
        answered only after ``connection.failed.authentication.delay.ms``, as Kafka answers a failed SASL login
        (KIP-306): awaited here, so a delayed answer holds no thread."""
        header = request.headers.get("authorization")
        try:
            return await run_in_threadpool(check, header, client_ip(request))
        except SaslAuthenticationFailedError:
            if header:
                await asyncio.sleep(self.config.failed_authentication_delay_ms / 1000)
            raise

    async def principal(self, request: Request) -> Principal | None:
        """The signed-in principal, None when the request signs in as nobody or fails to."""
        if not request.headers.get("authorization"):
            return None
        try:
            return await self.authenticate(self.access.principal, request)
        except SaslAuthenticationFailedError:
            return None

    def backtest(self, backtest_id: str) -> bt.Backtest:
        """A discovered backtest output by id; :class:`CommandError` (404) for none, or without ``--backtests``.
        Blocking (walks the directory): call off the event loop."""
        if self.config.backtests is None:
            raise CommandError("the console was started without --backtests DIR")
        return bt.find(self.config.backtests, backtest_id)

    def describe_backtest(self, backtest_id: str) -> dict[str, Any]:
        """Everything the backtest page shows (``/api/backtests/{id}``); blocking (Parquet reads)."""
        found = self.backtest(backtest_id)
        return {**bt.describe(found), "proposal": proposals.proposal(found, self.admin, self.store_id)}

    @property
    def store_id(self) -> str:
        """The console's store as ``recommend`` records the store a proposal was computed from."""
        return store_identity(getattr(self.store, "path", ""))


def client_ip(request: Request) -> str:
    """The peer's address: the key of the failed-login limit (behind a reverse proxy, the proxy's)."""
    return request.client.host if request.client is not None else ""


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console
