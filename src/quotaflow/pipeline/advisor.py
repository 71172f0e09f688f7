"""The quota advisor's definition: observed usage per entity as Kafka meters it, and the value it recommends.

For an entity at the chosen level (``user``, ``client-id``, ``user,client-id`` or ``client-id-prefix``) and a quota
key, a **second** is one (broker, epoch second): what that broker's quota manager would record for the entity in
that second.

* ``producer_byte_rate``: ``request_bytes`` of Produce requests (acks=0 included: the byte quota records them);
* ``consumer_byte_rate``: ``response_bytes`` of consumer Fetch requests (follower fetches are not recorded);
* ``request_percentage``: io + network thread time of the requests the request quota records (not the exempt
  ones: exempt-throttle APIs, follower fetches, produce with acks=0), as KIP-124 counts it: nanoseconds × 1e-7,
  percent of one thread (the integer nanoseconds of the second are summed first, then converted).

A **cell** is the rate over one quota window (``quota.window.num`` × ``quota.window.size.seconds``, the span Kafka
measures a quota's rate over) ending at a second of the trace: the window's usage / its length; one cell per
(broker, second) from the first second a whole window fits (the whole trace when it is shorter than a window).
Cells are zero-filled over the brokers where the key's manager recorded the entity; an entity gets a value for the
keys it used in at least ``min_active_seconds`` epoch seconds. The recommended value is the P-th percentile
(numpy's default linear interpolation) of the entity's cells × headroom, rounded up to three significant figures,
never below ``min_rate``; byte rates (Kafka ``LONG`` keys) are whole numbers. The zeros are never materialised:
the percentile is read off the sorted non-zero cells and the zero count, with numpy's own interpolation arithmetic
(equal bit for bit; a test checks it against ``np.percentile`` of the zero-filled array).

Everything here is numpy over one set of rows holding whole entities (a Spark partition, or all rows).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from quotaflow.core.keys import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, QUOTA_KEYS, REQUEST_PERCENTAGE
from quotaflow.engine.client_quota import NANOS_TO_PERCENT
from quotaflow.events import API_FETCH, API_PRODUCE
from quotaflow.pipeline.decide import F64, I64, RequestRows, exempt_from_request_quota

ADVISOR_KEYS: Final = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
KEY_TYPE: Final = {PRODUCER_BYTE_RATE: "produce", CONSUMER_BYTE_RATE: "fetch", REQUEST_PERCENTAGE: "request"}
"""Each key's quota manager (the backtest's quota type)."""
PREFIX_LEVEL: Final = "client-id-prefix"
LEVELS: Final = ("user", "client-id", "user,client-id", PREFIX_LEVEL)
DEFAULT_PERCENTILE: Final = 99.0
DEFAULT_HEADROOM: Final = 1.2
DEFAULT_MIN_RATE: Final = 1.0
"""Kafka rejects a quota of 0 ("must be greater than 0"): the floor keeps every recommended value valid."""
DEFAULT_MIN_ACTIVE_SECONDS: Final = 5
"""An entity's key seen in fewer epoch seconds than this gets no value: one second of traffic says nothing about
the rate a tenant needs (a proposal from it would cut a quota to ``min_rate``)."""
SIGNIFICANT_DIGITS: Final = 3
"""Recommended values are rounded up to this many significant figures: a quota a person reads and sets."""
QUANTILE_GRID: Final = tuple(float(q) for q in range(101))
"""Percentiles stored per (entity, key) to chart its usage distribution."""

USAGE_SCHEMA: Final = pa.schema(
    [
        pa.field("entity", pa.int64()),
        pa.field("key", pa.string()),
        pa.field("seconds", pa.int64()),  # the trace's seconds (first to last, inclusive)
        pa.field("brokers", pa.int64()),  # brokers the entity used
        pa.field("cells", pa.int64()),  # windows × brokers (a window ends at each second once one fits)
        pa.field("active_cells", pa.int64()),  # cells with usage > 0
        pa.field("total", pa.float64()),  # bytes, or % × s for request_percentage
        pa.field("mean", pa.float64()),  # total / (seconds × brokers): the mean rate per broker
        pa.field("p50", pa.float64()),
        pa.field("p90", pa.float64()),
        pa.field("p99", pa.float64()),
        pa.field("at_percentile", pa.float64()),  # the P-th percentile the value is made of
        pa.field("peak", pa.float64()),
        pa.field("recommended", pa.float64()),
        pa.field("quantiles", pa.list_(pa.float64())),  # percentiles 0..100 of the cells
        pa.field("throttled_seconds", pa.int64()),  # epoch seconds with a request this key's manager throttled now
    ]
)


@dataclass(frozen=True, slots=True)
class AdvisorSettings:
    """``--percentile``, ``--headroom``, ``--min-rate``, ``--keys`` and ``--min-active-seconds``."""

    percentile: float = DEFAULT_PERCENTILE
    headroom: float = DEFAULT_HEADROOM
    min_rate: float = DEFAULT_MIN_RATE
    keys: tuple[str, ...] = ADVISOR_KEYS
    min_active_seconds: int = DEFAULT_MIN_ACTIVE_SECONDS

    def validate(self) -> None:
        from quotaflow.core.errors import CommandError

        if not 0.0 <= self.percentile <= 100.0:
            raise CommandError(f"--percentile must be between 0 and 100, got {self.percentile}")
        if not (self.headroom > 0 and math.isfinite(self.headroom)):
            raise CommandError(f"--headroom must be a positive number, got {self.headroom}")
        if not (self.min_rate > 0 and math.isfinite(self.min_rate)):
            raise CommandError(f"--min-rate must be greater than 0 (Kafka rejects a quota of 0), got {self.min_rate}")
        unknown = [k for k in self.keys if k not in ADVISOR_KEYS]
        if unknown or not self.keys:
            raise CommandError(f"--keys takes {', '.join(ADVISOR_KEYS)}; got {', '.join(self.keys) or 'none'}")
        if self.min_active_seconds < 1:
            raise CommandError(f"--min-active-seconds must be at least 1, got {self.min_active_seconds}")

    def recommend(self, key: str, at_percentile: F64) -> F64:
        """P-th percentile × headroom rounded up to :data:`SIGNIFICANT_DIGITS` significant figures (whole numbers
        for LONG keys), floored at ``min_rate``."""
        raw = np.asarray(at_percentile * self.headroom, dtype=np.float64)
        rounded = np.array([round_up_significant(float(v)) for v in raw.ravel()], dtype=np.float64)
        value = np.maximum(rounded.reshape(raw.shape), self.min_rate)
        if QUOTA_KEYS[key].config_type.integral:
            value = np.ceil(value)
        return np.asarray(value, dtype=np.float64)


def round_up_significant(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """``value`` rounded up to ``digits`` significant figures (1735047.2 -> 1740000.0, 1.1100745 -> 1.12), never
    below it: a proposal is made of round numbers a person can read, and rounding up keeps the headroom. Decimal
    arithmetic on the float's shortest form, so a value already round (1.11) stays as it is."""
    if not (value > 0 and math.isfinite(value)):
        return value
    d = Decimal(repr(value))
    return float(d.quantize(Decimal(1).scaleb(d.adjusted() - digits + 1), rounding=ROUND_CEILING))


@dataclass(frozen=True, slots=True)
class Metered:
    """Per row: what each manager records (bytes, bytes, thread nanoseconds; 0 where it records nothing) and
    whether it records the row at all."""

    produce: I64
    fetch: I64
    request_ns: I64
    records: dict[str, npt.NDArray[np.bool_]]  # key -> the key's manager records the row

    def of_key(self, key: str) -> I64:
        return {PRODUCER_BYTE_RATE: self.produce, CONSUMER_BYTE_RATE: self.fetch, REQUEST_PERCENTAGE: self.request_ns}[
            key
        ]


def metered(rows: RequestRows) -> Metered:
    """What the three quota managers record for each row."""
    produce = rows.api_key == API_PRODUCE
    fetch = (rows.api_key == API_FETCH) & ~rows.is_follower
    recorded = ~exempt_from_request_quota(rows.api_key, rows.acks, rows.is_follower)
    zero = np.zeros(len(rows.ts_ms), dtype=np.int64)
    return Metered(
        np.where(produce, rows.request_bytes, zero), np.where(fetch, rows.response_bytes, zero),
        np.where(recorded, rows.io_thread_ns + rows.network_thread_ns, zero),
        {PRODUCER_BYTE_RATE: produce, CONSUMER_BYTE_RATE: fetch, REQUEST_PERCENTAGE: recorded},
    )  # fmt: skip


def cell_value(key: str, summed: I64) -> F64:
    """A cell's usage from its summed integer record: bytes, or thread nanoseconds × 1e-7 (% of one thread)."""
    if key == REQUEST_PERCENTAGE:
        return summed.astype(np.float64) * NANOS_TO_PERCENT
    return summed.astype(np.float64)


def percentile_zero_filled(group: I64, values: F64, total: I64, q: float) -> F64:
    """Per group g: ``np.percentile(a_g, q)`` where ``a_g`` is ``total[g]`` cells, the group's positive ``values``
    and zeros for the rest. ``group``/``values`` sorted by (group, value); ``group`` dense 0..G-1.

    numpy's "linear" method: virtual index ``(n - 1) × q/100``, neighbours ``floor`` and ``floor + 1`` (both the
    last element above the end), then ``_lerp``."""
    groups = len(total)
    positive = np.bincount(group, minlength=groups).astype(np.int64)
    start = np.concatenate(([0], np.cumsum(positive)[:-1])).astype(np.int64) if groups else np.zeros(0, np.int64)
    zeros = total - positive
    quantile = np.true_divide(q, 100)
    virtual = (total - 1) * quantile
    prev = np.floor(virtual)
    above = virtual >= total - 1
    lo = np.where(above, total - 1, prev).astype(np.int64)
    hi = np.where(above, total - 1, prev + 1).astype(np.int64)
    gamma = virtual - np.where(above, -1.0, prev)  # numpy computes gamma after moving both indexes to -1 above

    def at(i: I64) -> F64:
        k = i - zeros
        safe = np.clip(start + k, 0, max(len(values) - 1, 0))
        picked = values[safe] if len(values) else np.zeros(len(i))
        return np.where(k >= 0, picked, 0.0)

    a, b = at(lo), at(hi)
    diff = b - a
    out = a + diff * gamma
    return np.asarray(np.where(gamma >= 0.5, b - diff * (1 - gamma), out), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class UsageInputs:
    """What the usage of one set of rows needs beyond the rows: each row's entity (-1: none), the trace's seconds,
    the quota window (``quota.window.num`` × ``quota.window.size.seconds``, the span Kafka's rate is measured
    over) and, per quota type, what today's quotas throttled each row (ms; the evidence beside a value).
    ``by_type``: each row's entity per quota type where it depends on the type (a ``client-id-prefix`` bucket:
    which clients share it is resolved per quota manager); else ``entity`` for every key."""

    entity: I64
    first_second: int
    last_second: int
    by_type: Mapping[str, I64] | None = None
    window_seconds: int = 1
    throttled: Mapping[str, I64] | None = None

    def of_key(self, key: str) -> I64:
        return self.entity if self.by_type is None else self.by_type[KEY_TYPE[key]]

    @property
    def seconds(self) -> int:
        return self.last_second - self.first_second + 1

    @property
    def window(self) -> int:
        """The window a cell's rate is measured over: the quota window, or the whole trace if it is shorter."""
        return max(1, min(self.window_seconds, self.seconds))


def usage_table(rows: RequestRows, m: Metered, u: UsageInputs, settings: AdvisorSettings) -> pa.Table:
    """One row per (entity present in ``rows``, key it used): the distribution of its cells and the recommended
    value. ``rows`` must hold every row of each of its entities (all brokers). One sort of the rows by
    (entity, broker, second) gives the cells of every key that shares the rows' entities."""
    groups: dict[int, tuple[I64, list[str]]] = {}
    for key in settings.keys:
        entity = u.of_key(key)
        groups.setdefault(id(entity), (entity, []))[1].append(key)
    parts = [_usage_of(rows, m, entity, keys, u, settings) for entity, keys in groups.values()]
    parts = [p for p in parts if p.num_rows]
    return pa.concat_tables(parts) if parts else USAGE_SCHEMA.empty_table()


def window_sums(key_of_second: I64, summed: I64, seconds: int, window: int) -> tuple[I64, I64]:
    """Sliding sums over ``window`` seconds of per-(group, second) integers: ``key_of_second`` = group × seconds +
    second (sorted, distinct), ``summed`` their totals. Returns the keys (group × seconds + last second) and sums
    of every window that ends in the trace (a full window: last second ≥ window - 1) and holds a recorded second,
    in key order; every other window sums to 0. Integer prefix sums: exact. Dense rows per group when that is
    no bigger than the sparse candidates (active seconds × window), else sparse."""
    if not len(key_of_second):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    groups, row = np.unique(key_of_second // seconds, return_inverse=True)
    if len(groups) * seconds <= len(key_of_second) * window:
        return _window_sums_dense(groups, row, key_of_second % seconds, summed, seconds, window)
    return _window_sums_sparse(key_of_second, summed, seconds, window)


def _window_sums_dense(groups: I64, row: I64, second: I64, summed: I64, seconds: int,
                       window: int) -> tuple[I64, I64]:  # fmt: skip
    prefix = np.zeros((len(groups), seconds + 1), dtype=np.int64)
    prefix[row, second + 1] = summed
    np.cumsum(prefix, axis=1, out=prefix)
    sums = prefix[:, window:] - prefix[:, : seconds + 1 - window]  # windows ending at window - 1 .. seconds - 1
    g, end = np.nonzero(sums)
    return groups[g] * seconds + end + window - 1, sums[g, end]


def _window_sums_sparse(key_of_second: I64, summed: I64, seconds: int, window: int) -> tuple[I64, I64]:
    second = key_of_second % seconds
    ends = (key_of_second[:, None] + np.arange(window, dtype=np.int64)[None, :]).ravel()
    end_second = (second[:, None] + np.arange(window, dtype=np.int64)[None, :]).ravel()
    ends = np.unique(ends[(end_second >= window - 1) & (end_second < seconds)])
    prefix = np.concatenate(([0], np.cumsum(summed))).astype(np.int64)
    upto = np.searchsorted(key_of_second, ends, side="right")
    before = np.searchsorted(key_of_second, ends - window, side="right")
    sums = prefix[upto] - prefix[before]
    keep = sums != 0
    return ends[keep], sums[keep]


def _usage_of(rows: RequestRows, m: Metered, entity: I64, keys: list[str], u: UsageInputs,
              settings: AdvisorSettings) -> pa.Table:  # fmt: skip
    """:func:`usage_table` for the ``keys`` whose cells belong to the rows' ``entity``.

    A cell is one (broker, window of the quota's span ending at a second of the trace): the rate Kafka's quota
    manager compares with the quota at that second (the usage of the window / its length). Per-second cells would
    size a quota for a throttled client's start-up burst (it spends a whole window's quota in its first second);
    the quota is enforced over the window, so the window is the statistic."""
    seconds, window = u.seconds, u.window
    recorded = np.zeros(len(entity), dtype=bool)
    for key in keys:
        recorded |= m.records[key]
    take = np.flatnonzero((entity >= 0) & recorded)
    if not len(take):
        return USAGE_SCHEMA.empty_table()
    ent = entity[take]
    width = int(ent.max()) + 1  # entity ids are dense
    n_brokers = int(rows.broker[take].max()) + 1
    second = rows.ts_ms[take] // 1000 - u.first_second
    cell_key = (ent * n_brokers + rows.broker[take]) * seconds + second
    order = np.argsort(cell_key, kind="stable")
    sorted_key = cell_key[order]
    starts = np.flatnonzero(np.diff(sorted_key, prepend=-1) != 0)
    cell_eb = sorted_key[starts] // seconds  # entity * n_brokers + broker of each (broker, second)
    windows = seconds - window + 1  # per (entity, broker)
    parts = []
    for key in keys:
        hits = np.add.reduceat(m.records[key][take][order].astype(np.int64), starts)
        used = np.unique(cell_eb[hits > 0])  # the (entity, broker) where this key's manager recorded
        brokers_used = np.bincount(used // n_brokers, minlength=width)
        present = np.flatnonzero(brokers_used)
        if not len(present):
            continue
        dense = np.full(width, -1, dtype=np.int64)
        dense[present] = np.arange(len(present))
        summed = np.add.reduceat(m.of_key(key)[take][order], starts)
        ends, sums = window_sums(sorted_key[starts], summed, seconds, window)
        value = cell_value(key, sums) / window
        pos = value > 0
        throttled = _throttled_seconds(key, u, take, ent, second, width)
        owner = cell_eb // n_brokers
        total = np.bincount(owner, weights=cell_value(key, summed), minlength=width).astype(np.float64)
        parts.append(_usage_rows(key, present, dense[ends[pos] // seconds // n_brokers], value[pos],
                                 brokers_used[present].astype(np.int64), windows, seconds, total[present],
                                 throttled[present], settings))  # fmt: skip
    return pa.concat_tables(parts) if parts else USAGE_SCHEMA.empty_table()


def _throttled_seconds(key: str, u: UsageInputs, take: I64, ent: I64, second: I64, width: int) -> I64:
    """Per entity: the epoch seconds in which today's quotas throttled one of its requests for this key's type."""
    if u.throttled is None:
        return np.zeros(width, dtype=np.int64)
    hit = np.flatnonzero(u.throttled[KEY_TYPE[key]][take] > 0)
    distinct = np.unique(ent[hit] * (1 << 32) + second[hit])
    return np.bincount(distinct >> 32, minlength=width).astype(np.int64)


def _usage_rows(key: str, ents: I64, g: I64, v: F64, brokers_used: I64, windows: int, seconds: int, total: F64,
                throttled: I64, settings: AdvisorSettings) -> pa.Table:  # fmt: skip
    """The usage rows of one key: entities ``ents``, their positive cells ``v`` (``g``: index into ``ents``),
    ``total`` their usage over the trace (bytes, or % × s)."""
    n = len(ents)
    cells_total = brokers_used * windows
    by = np.lexsort((v, g))
    g, v = g[by], v[by]

    def pct(q: float) -> F64:
        return percentile_zero_filled(g, v, cells_total, q)

    chosen = pct(settings.percentile)
    peak = np.zeros(n)
    np.maximum.at(peak, g, v)
    grid = np.stack([pct(q) for q in QUANTILE_GRID], axis=1)
    cols = {
        "entity": ents, "key": [key] * n, "seconds": np.full(n, seconds), "brokers": brokers_used,
        "cells": cells_total, "active_cells": np.bincount(g, minlength=n), "total": total,
        "mean": total / (brokers_used * seconds), "p50": pct(50.0), "p90": pct(90.0), "p99": pct(99.0),
        "at_percentile": chosen, "peak": peak, "recommended": settings.recommend(key, chosen), "quantiles": list(grid),
        "throttled_seconds": throttled,
    }  # fmt: skip
    return pa.table({f.name: pa.array(cols[f.name], f.type) for f in USAGE_SCHEMA}, schema=USAGE_SCHEMA)


# -- outcome: what the throttling did to each entity ------------------------------------------------------------
OUTCOME_SIDES: Final = ("before", "after")
OUTCOME_FIELDS: Final = ("throttled_requests", "throttle_s", "throttled_seconds", "delayed_bytes")
OUTCOME_SCHEMA: Final = pa.schema(
    [pa.field("entity", pa.int64()), pa.field("requests", pa.int64())]
    + [pa.field(f"{f}_{side}", pa.float64() if f == "throttle_s" else pa.int64())
       for side in OUTCOME_SIDES for f in OUTCOME_FIELDS]
)


def outcome_table(rows: RequestRows, m: Metered, entity: I64, applied: Sequence[I64]) -> pa.Table:
    """Per entity of ``rows``, for each side's applied ``throttle_ms``: throttled requests, throttle time (s),
    throttled seconds (distinct epoch seconds with a throttled request) and delayed bytes (produce request bytes
    and consumer fetch response bytes of throttled requests)."""
    take = np.flatnonzero(entity >= 0)
    if not len(take):
        return OUTCOME_SCHEMA.empty_table()
    ent = entity[take]
    width = int(ent.max()) + 1  # entity ids are dense: counted per id, then the ids present kept
    count = np.bincount(ent, minlength=width)
    present = np.flatnonzero(count)
    cols: dict[str, object] = {"entity": present, "requests": count[present]}
    moved = (m.produce + m.fetch)[take]  # a row is produce or fetch, never both
    second = rows.ts_ms[take] // 1000
    for side, throttle in zip(OUTCOME_SIDES, applied, strict=True):
        t = throttle[take]
        hit = np.flatnonzero(t > 0)  # few rows: only these are sorted
        e_hit = ent[hit]
        cols[f"throttled_requests_{side}"] = np.bincount(e_hit, minlength=width)[present]
        cols[f"throttle_s_{side}"] = np.bincount(e_hit, weights=t[hit], minlength=width)[present] / 1000.0
        distinct = np.unique(e_hit * (1 << 40) + (second[hit] - int(second.min())))
        cols[f"throttled_seconds_{side}"] = np.bincount(distinct >> 40, minlength=width)[present]
        delayed = np.bincount(e_hit, weights=moved[hit], minlength=width)[present]
        cols[f"delayed_bytes_{side}"] = delayed.astype(np.int64)
    return pa.table({f.name: pa.array(cols[f.name], f.type) for f in OUTCOME_SCHEMA}, schema=OUTCOME_SCHEMA)


def entity_wire(level: str, user: str, client_id: str) -> dict[str, str | None]:
    """The entity a (user, client_id) pair belongs to at ``level``, in ``client-quotas --output json`` form
    (not ``client-id-prefix``: which prefix bucket holds a client is the quota model's resolution, per type)."""
    if level == "user":
        return {"user": user}
    if level == "client-id":
        return {"client-id": client_id}
    return {"user": user, "client-id": client_id}


def settable(entity: Mapping[str, str | None]) -> bool:
    """Kafka refuses an empty name ("Empty user not supported"): such clients get no entity of their own."""
    return all(v for v in entity.values())
