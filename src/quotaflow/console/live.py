"""The Live page's data: the gateways' ``/metrics`` scraped on an interval, kept as bounded per-series history.

Series are read by their Prometheus names (docs/metrics.md): per quota-id ``kafka_server_<type>_byte_rate`` /
``request_time`` / ``mutation_rate`` and ``kafka_server_<type>_throttle_time``, and the connection-quota family
``kafka_server_socket_server_metrics_*``. The quota each series is held to is not a metric (Kafka keeps it in the
sensor's config), so it comes from the store: ``quotaLimit(tags)`` over the current snapshot, the value the gateway
enforces once it has polled the same change. Memory is bounded: ``history`` points per series, ``max_series`` series
per gateway (the rest are counted as dropped); a series the gateway stopped exporting is forgotten once its whole
history has passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import httpx2
from prometheus_client.parser import text_string_to_metric_families

from quotaflow.admin import QuotaIndex
from quotaflow.core.sanitize import desanitize

# quota type -> (rate metric, quota key, unit)
RATE_METRICS: Final = {
    "produce": ("kafka_server_produce_byte_rate", "producer_byte_rate", "bytes/s"),
    "fetch": ("kafka_server_fetch_byte_rate", "consumer_byte_rate", "bytes/s"),
    "request": ("kafka_server_request_request_time", "request_percentage", "% of one thread"),
    "controller_mutation": (
        "kafka_server_controller_mutation_mutation_rate",
        "controller_mutation_rate",
        "mutations/s",
    ),
}
THROTTLE_METRIC: Final = "kafka_server_{}_throttle_time"
CONNECTION_PREFIX: Final = "kafka_server_socket_server_metrics_"
ACCEPTOR_BLOCKED: Final = "kafka_server_acceptor_acceptor_blocked_percent"
DEFAULT_INTERVAL_S: Final = 2.0
DEFAULT_HISTORY: Final = 300
DEFAULT_MAX_SERIES: Final = 5000
TOP_N: Final = 6

_BY_NAME: Final = {metric: qt for qt, (metric, _key, _unit) in RATE_METRICS.items()}
_THROTTLE_BY_NAME: Final = {THROTTLE_METRIC.format(qt): qt for qt in RATE_METRICS}

# A running shadow set's families (docs/metrics.md, Shadow quotas): the shadow managers' per-quota-id samples with a
# shadow_id tag, and the count of requests the shadow would have throttled. The rate families say which quota-ids the
# shadow meters (its throttle-time sensor exists only once it throttled).
SHADOW_TYPES: Final = ("produce", "fetch", "request")
SHADOW_THROTTLE_METRIC: Final = "kafka_server_shadow_{}_throttle_time"
SHADOW_RATE_METRICS: Final = {
    "kafka_server_shadow_produce_byte_rate": "produce",
    "kafka_server_shadow_fetch_byte_rate": "fetch",
    "kafka_server_shadow_request_request_time": "request",
}
SHADOW_THROTTLED: Final = "kafka_server_shadow_throttled_requests_total"
SHADOW_CONNECTIONS: Final = "kafka_server_shadow_connections_total"
_SHADOW_THROTTLE_BY_NAME: Final = {SHADOW_THROTTLE_METRIC.format(qt): qt for qt in SHADOW_TYPES}

EntityKey = tuple[str, str, str, str]  # gateway, quota type, user tag (sanitized), client-id tag
ShadowKey = tuple[str, str, str, str, str]  # gateway, shadow_id, quota type, user tag (sanitized), client-id tag


def _finite(value: float) -> float:
    return 0.0 if math.isnan(value) or math.isinf(value) else value


@dataclass(slots=True)
class EntitySeries:
    """One quota-id on one gateway: (time s, rate, quota or None, throttle ms) per scrape."""

    points: deque[tuple[float, float, float | None, float]]
    rate: float = 0.0
    throttle_ms: float = 0.0
    last_seen: float = 0.0


@dataclass(slots=True)
class ShadowSeries:
    """One quota-id on one gateway under one shadow set: (time s, live throttle ms, shadow throttle ms, requests the
    shadow would have throttled so far) per scrape. The live reading is the enforced managers' own
    ``kafka_server_<type>_throttle_time`` for the same tags, so the two lines are the same quota-id's two decisions."""

    points: deque[tuple[float, float, float, float]]
    live_throttle_ms: float = 0.0
    shadow_throttle_ms: float = 0.0
    shadow_rate: float = 0.0
    throttled_requests: float = 0.0
    last_seen: float = 0.0


@dataclass(slots=True)
class GatewayState:
    url: str
    ok: bool = False
    error: str | None = None
    last_scrape: float | None = None
    dropped_series: int = 0
    entities: dict[EntityKey, EntitySeries] = field(default_factory=dict)
    # connection metrics: (metric, labels as "k=v,..") -> points (time s, value)
    connections: dict[tuple[str, str], deque[tuple[float, float]]] = field(default_factory=dict)
    shadow: dict[ShadowKey, ShadowSeries] = field(default_factory=dict)


class LiveMetrics:
    """Scrapes every gateway's ``/metrics`` and answers the Live page's questions."""

    def __init__(
        self,
        gateways: Sequence[str],
        index: Callable[[], QuotaIndex],
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        history: int = DEFAULT_HISTORY,
        max_series: int = DEFAULT_MAX_SERIES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.gateways = {url.rstrip("/"): GatewayState(url.rstrip("/")) for url in gateways}
        self._index = index
        self.interval_s = interval_s
        self.history = history
        self.max_series = max_series
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    # -- scraping ---------------------------------------------------------------------------------------------
    async def scrape_once(self, client: httpx2.AsyncClient) -> None:
        """Scrape every gateway once (concurrently); a failed gateway records its error, the others go on.
        The quotas are read off the event loop: after a store change the index is rebuilt from a whole snapshot."""
        index = await asyncio.to_thread(self._index)
        await asyncio.gather(*(self._scrape(client, gw, index) for gw in self.gateways.values()))

    async def _scrape(self, client: httpx2.AsyncClient, gw: GatewayState, index: QuotaIndex) -> None:
        try:
            response = await client.get(f"{gw.url}/metrics")
            response.raise_for_status()
            text = response.text
        except httpx2.HTTPError as e:
            gw.ok, gw.error = False, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            return
        try:
            self.ingest(gw, text, self._clock(), index)
        except ValueError as e:  # not Prometheus text
            gw.ok, gw.error = False, f"unreadable /metrics: {e}"
            return
        gw.ok, gw.error = True, None

    def ingest(self, gw: GatewayState, text: str, now: float, index: QuotaIndex | None = None) -> None:
        """Add one scrape's samples to the history, their quotas from ``index`` (default: the current one)."""
        self._forget_stale(gw, now)
        index = self._index() if index is None else index
        rates: dict[EntityKey, float] = {}
        throttles: dict[EntityKey, float] = {}
        shadow = _ShadowScrape()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name, labels, value = sample.name, sample.labels, float(sample.value)
                if name.startswith("kafka_server_shadow_") and name != SHADOW_CONNECTIONS:
                    shadow.add(gw.url, name, labels, _finite(value))
                elif name in _BY_NAME or name in _THROTTLE_BY_NAME:
                    qt = _BY_NAME.get(name) or _THROTTLE_BY_NAME[name]
                    key = (gw.url, qt, labels.get("user", ""), labels.get("client_id", ""))
                    (rates if name in _BY_NAME else throttles)[key] = _finite(value)
                elif name.startswith(CONNECTION_PREFIX) or name in (ACCEPTOR_BLOCKED, SHADOW_CONNECTIONS):
                    lkey = ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if v)
                    series = gw.connections.get((name, lkey))
                    if series is None:
                        if self._full(gw):
                            gw.dropped_series += 1
                            continue
                        series = gw.connections[(name, lkey)] = deque(maxlen=self.history)
                    series.append((now, _finite(value)))
        for key in rates.keys() | throttles.keys():
            entity = gw.entities.get(key)
            if entity is None:
                if self._full(gw):
                    gw.dropped_series += 1
                    continue
                entity = gw.entities[key] = EntitySeries(deque(maxlen=self.history))
            quota = index.quota_for_tags(RATE_METRICS[key[1]][1], key[2], key[3])
            entity.rate = rates.get(key, 0.0)
            entity.throttle_ms = throttles.get(key, 0.0)
            entity.last_seen = now
            entity.points.append((now, entity.rate, None if quota is None else quota[1], entity.throttle_ms))
        self._ingest_shadow(gw, shadow, throttles, now)
        gw.last_scrape = now

    def _ingest_shadow(self, gw: GatewayState, scrape: _ShadowScrape, live_throttles: dict[EntityKey, float],
                       now: float) -> None:
        for key in scrape.quota_ids():
            series = gw.shadow.get(key)
            if series is None:
                if self._full(gw):
                    gw.dropped_series += 1
                    continue
                series = gw.shadow[key] = ShadowSeries(deque(maxlen=self.history))
            url, _sid, qt, user, client = key
            series.live_throttle_ms = live_throttles.get((url, qt, user, client), 0.0)
            series.shadow_throttle_ms = scrape.throttles.get(key, 0.0)
            series.shadow_rate = scrape.rates.get(key, 0.0)
            series.throttled_requests = scrape.counts.get(key, 0.0)
            series.last_seen = now
            series.points.append((now, series.live_throttle_ms, series.shadow_throttle_ms, series.throttled_requests))

    def _forget_stale(self, gw: GatewayState, now: float) -> None:
        """Forget series the gateway has not exported for longer than the history spans (their sensors expired, the
        client left): with clients coming and going, the ``max_series`` bound keeps room for the new ones."""
        horizon = now - self.history * self.interval_s
        for key in [k for k, s in gw.entities.items() if s.last_seen < horizon]:
            del gw.entities[key]
        for ckey in [k for k, points in gw.connections.items() if not points or points[-1][0] < horizon]:
            del gw.connections[ckey]
        for skey in [k for k, s in gw.shadow.items() if s.last_seen < horizon]:
            del gw.shadow[skey]

    def _full(self, gw: GatewayState) -> bool:
        return len(gw.entities) + len(gw.connections) + len(gw.shadow) >= self.max_series

    async def run(self) -> None:
        """Scrape forever, every ``interval_s``."""
        async with httpx2.AsyncClient(timeout=max(1.0, self.interval_s)) as client:
            while True:
                await self.scrape_once(client)
                await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        if self.gateways and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # -- answers ----------------------------------------------------------------------------------------------
    def entity_rows(self, index: QuotaIndex | None = None) -> list[dict[str, Any]]:
        """Every quota-id's latest reading, most throttled first (then closest to its quota)."""
        index = self._index() if index is None else index
        rows: list[dict[str, Any]] = []
        for gw in self.gateways.values():
            for (url, qt, user, client), s in gw.entities.items():
                metric, key, unit = RATE_METRICS[qt]
                quota = index.quota_for_tags(key, user, client)
                rows.append(
                    {
                        "id": "|".join((url, qt, user, client)),
                        "gateway": url,
                        "quota_type": qt,
                        "key": key,
                        "unit": unit,
                        "metric": metric,
                        "user": user,
                        "user_name": desanitize(user) if user else "",
                        "client_id": client,
                        "rate": s.rate,
                        "quota": None if quota is None else quota[1],
                        "quota_entity": None if quota is None else quota[0].to_wire(),
                        "usage": s.rate / quota[1] if quota is not None and quota[1] > 0 else None,
                        "throttle_time_ms": s.throttle_ms,
                        "throttled": s.throttle_ms > 0,
                        "last_seen": s.last_seen,
                    }
                )
        rows.sort(key=lambda r: (-r["throttle_time_ms"], -(r["usage"] or 0.0), -r["rate"], r["id"]))
        return rows

    def history_of(self, entity_id: str) -> dict[str, list[Any]] | None:
        """Columns for a chart: time (s), rate, quota (null = unlimited), throttle ms."""
        url, _, rest = entity_id.partition("|")
        gw = self.gateways.get(url)
        parts = rest.split("|", 2)  # the user tag is sanitized (no "|"); the client-id takes the rest
        if gw is None or len(parts) != 3:
            return None
        series = gw.entities.get((url, parts[0], parts[1], parts[2]))
        if series is None:
            return None
        t, rate, quota, throttle = zip(*series.points, strict=True) if series.points else ((), (), (), ())
        return {"t": list(t), "rate": list(rate), "quota": list(quota), "throttle_ms": list(throttle)}

    def shadow_rows(self, shadow_id: int | None) -> list[dict[str, Any]]:
        """Per quota-id under the shadow set ``shadow_id`` (None: any): live vs shadow throttle time now and over
        time, and the requests the shadow would have throttled; where the two decisions differ most first."""
        rows: list[dict[str, Any]] = []
        for gw in self.gateways.values():
            for (url, sid, qt, user, client), s in gw.shadow.items():
                if shadow_id is not None and sid != str(shadow_id):
                    continue
                t, live_ms, shadow_ms, counts = zip(*s.points, strict=True) if s.points else ((), (), (), ())
                rows.append({
                    "id": "|".join((url, sid, qt, user, client)), "gateway": url, "shadow_id": sid,
                    "quota_type": qt, "user": user, "user_name": desanitize(user) if user else "",
                    "client_id": client, "live_throttle_ms": s.live_throttle_ms,
                    "shadow_throttle_ms": s.shadow_throttle_ms, "shadow_rate": s.shadow_rate,
                    "shadow_throttled_requests": s.throttled_requests, "last_seen": s.last_seen,
                    "history": {"t": list(t), "live_throttle_ms": list(live_ms), "shadow_throttle_ms": list(shadow_ms),
                                "shadow_throttled_requests": list(counts)},
                })  # fmt: skip
        rows.sort(key=lambda r: (-abs(r["shadow_throttle_ms"] - r["live_throttle_ms"]),
                                 -r["shadow_throttled_requests"], r["id"]))  # fmt: skip
        return rows

    def connection_rows(self) -> list[dict[str, Any]]:
        rows = []
        for gw in self.gateways.values():
            for (metric, labels), points in sorted(gw.connections.items()):
                t, v = zip(*points, strict=True) if points else ((), ())
                rows.append(
                    {
                        "gateway": gw.url,
                        "metric": metric.removeprefix(CONNECTION_PREFIX).removeprefix("kafka_server_"),
                        "labels": labels,
                        "value": v[-1] if v else 0.0,
                        "t": list(t),
                        "values": list(v),
                    }
                )
        return rows

    def snapshot(self, top: int = TOP_N, index: QuotaIndex | None = None) -> dict[str, Any]:
        """The ``/api/live`` document."""
        entities = self.entity_rows(index)
        return {
            "interval_s": self.interval_s,
            "history_points": self.history,
            "gateways": [
                {
                    "url": gw.url,
                    "ok": gw.ok,
                    "error": gw.error,
                    "last_scrape": gw.last_scrape,
                    "series": len(gw.entities) + len(gw.connections) + len(gw.shadow),
                    "dropped_series": gw.dropped_series,
                }
                for gw in self.gateways.values()
            ],
            "entities": entities,
            "top": [{**row, "history": self.history_of(row["id"])} for row in entities[:top]],
            "connections": self.connection_rows(),
        }


class _ShadowScrape:
    """One scrape's shadow samples per (gateway, shadow_id, type, user, client-id). A gateway runs one broker
    per upstream broker, each with its own managers: throttle times take the largest, rates and counts add up."""

    __slots__ = ("counts", "rates", "throttles")

    def __init__(self) -> None:
        self.throttles: dict[ShadowKey, float] = {}
        self.rates: dict[ShadowKey, float] = {}
        self.counts: dict[ShadowKey, float] = {}

    def add(self, url: str, name: str, labels: dict[str, str], value: float) -> None:
        sid = labels.get("shadow_id", "")
        if name == SHADOW_THROTTLED:
            qt = labels.get("quota_type", "")
            into = self.counts
        elif name in _SHADOW_THROTTLE_BY_NAME:
            qt, into = _SHADOW_THROTTLE_BY_NAME[name], self.throttles
        elif name in SHADOW_RATE_METRICS:
            qt, into = SHADOW_RATE_METRICS[name], self.rates
        else:
            return
        if qt not in SHADOW_TYPES or not sid:
            return
        key = (url, sid, qt, labels.get("user", ""), labels.get("client_id", ""))
        if into is self.throttles:
            into[key] = max(into.get(key, 0.0), value)
        else:
            into[key] = into.get(key, 0.0) + value

    def quota_ids(self) -> set[ShadowKey]:
        return self.throttles.keys() | self.rates.keys() | self.counts.keys()
