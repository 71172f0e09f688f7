"""The console's state: one store, its admin and resolver, the write policy, the live scraper, the backtests root.

Handlers reach it through ``request.app.state.console`` (:func:`console_of`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

import quotaflow.console.backtests as bt
from quotaflow.admin import Admin, QuotaIndex, Resolution
from quotaflow.console import proposals
from quotaflow.console.access import Access, Principal
from quotaflow.console.live import DEFAULT_HISTORY, DEFAULT_INTERVAL_S, LiveMetrics
from quotaflow.core.errors import CommandError, SaslAuthenticationFailedError
from quotaflow.store.base import QuotaStore


@dataclass(slots=True)
class ConsoleConfig:
    """What ``quotaflow console`` was started with."""

    gateways: Sequence[str] = ()
    backtests: Path | None = None
    read_only: bool = False
    admins: frozenset[str] | None = None
    scrape_interval_s: float = DEFAULT_INTERVAL_S
    history: int = DEFAULT_HISTORY


class Console:
    """The app's state: one store, its admin, the write policy, the live scraper, where backtests are."""

    def __init__(self, store: QuotaStore, config: ConsoleConfig) -> None:
        self.store = store
        self.config = config
        self.admin = Admin(store)
        self.access = Access(store, read_only=config.read_only, admins=config.admins)
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

    async def principal(self, request: Request) -> Principal | None:
        header = request.headers.get("authorization")
        if not header:
            return None
        try:
            return await run_in_threadpool(self.access.principal, header)
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
        return {**bt.describe(found), "proposal": proposals.proposal(found, self.admin)}


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console
