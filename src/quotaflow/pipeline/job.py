"""What a backtest or replay run needs (inputs, config, output layout), shared by the Spark and single-process jobs.

Output layout under OUT (Parquet datasets; docs/backtest.md):
``decisions/`` ``connections/`` ``windows/`` ``entities/`` ``quarantine/{requests,connections}/`` ``compare/``
and ``_SUMMARY.json`` (counts and timings).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from quotaflow import brokerconfig
from quotaflow.engine.connection import ConnectionQuotaConfig
from quotaflow.events import check_events_dir
from quotaflow.pipeline.decide import WindowSettings
from quotaflow.pipeline.resolve import QuotaConfig, load_config

DECISIONS: Final = "decisions"
CONNECTIONS: Final = "connections"
WINDOWS: Final = "windows"
ENTITIES: Final = "entities"
QUARANTINE: Final = "quarantine"
COMPARE: Final = "compare"
COMPARE_SUMMARY: Final = "compare_summary"
SUMMARY: Final = "_SUMMARY.json"
DEFAULT_HEADROOM: Final = 1.2

DECISION_KEYS: Final = ("broker", "seq")
"""The narrow decisions' key: joins each decision to its event (``seq`` is unique per broker, docs/events.md)."""
DECIDE_COLUMNS: Final = (
    "broker", "seq", "user", "client_id", "ts_ms", "api_key", "acks", "is_follower", "request_bytes",
    "response_bytes", "io_thread_ns", "network_thread_ns",
)  # fmt: skip
"""The request columns the decisions and windows read (everything else is read only with ``--with-inputs``)."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    events: Path
    store: str | Path  # a --store value: SQLite path or URL, or kafka://... (read once as a snapshot)
    out: Path
    broker_config: Path | None = None
    compare: str | Path | None = None
    headroom: float = DEFAULT_HEADROOM
    with_inputs: bool = False
    """Write every input column next to the decisions (the wide table) instead of (broker, seq) + decisions."""

    def connection_config(self) -> ConnectionQuotaConfig:
        if self.broker_config is None:
            return ConnectionQuotaConfig()
        return brokerconfig.load(self.broker_config)

    def windows(self) -> WindowSettings:
        c = self.connection_config()
        return WindowSettings(c.quota_window_num, c.quota_window_size_seconds)

    def excluded_principals(self) -> frozenset[str]:
        """``quotaflow.quota.excluded.principals`` of the broker config (the gateway's ``--config`` setting)."""
        if self.broker_config is None:
            return frozenset()
        return brokerconfig.excluded_principals(self.broker_config)

    def quota_config(self, which: str | Path | None = None) -> QuotaConfig:
        return load_config(which or self.store, self.excluded_principals())

    def validate(self) -> dict[str, list[Path]]:
        """Fail early with a clear message: missing events, store, broker config or comparison store."""
        files = check_events_dir(self.events)
        self.quota_config()
        if self.compare is not None:
            self.quota_config(self.compare)
        self.connection_config()
        return files


@dataclass
class Summary:
    """Counts and timings of one run, written as OUT/_SUMMARY.json."""

    engine: str
    counts: dict[str, int] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @contextmanager
    def timed(self, name: str, progress: Callable[[str], None] | None = None) -> Iterator[None]:
        if progress is not None:
            progress(name)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings_s[name] = round(time.perf_counter() - t0, 3)

    def write(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        payload = {"engine": self.engine, "counts": self.counts, "timings_s": self.timings_s, **self.extra}
        (out / SUMMARY).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
