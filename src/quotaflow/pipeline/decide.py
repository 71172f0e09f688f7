"""Per-batch drivers of the engine's array kernel, shared by the Spark backtest and the single-process replay.

Both drivers hand over Arrow batches sorted by (group key, ts_ms, seq); a quota-id's rows may continue into the
next batch of the same partition, so each driver carries that one group's :class:`KernelState` row across calls.
All work per batch is vectorised; the per-row loop is the kernel's (``decide_groups``).

* Request pass (KIP-124), key (broker, request quota-id): every request records io-thread time ×1e-7 % with a
  check, then network-thread time without one (same timestamp); exempt requests (KIP-124) and a disabled manager
  record nothing. Throttle capped at one sample window.
* Byte pass (KIP-55), key (broker, byte type, quota-id): produce records ``request_bytes``; consumer fetch records
  ``response_bytes`` with the request throttle as floor and un-records when the applied throttle is positive.
  Follower fetches and other APIs are not recorded. Applied ``throttle_ms`` = max over the managers that apply.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from quotaflow.core.keys import UNLIMITED
from quotaflow.engine.exempt import EXEMPT_THROTTLE_API_KEYS, PRODUCE_API_KEY
from quotaflow.engine.kernel import (
    HAVE_NUMBA,
    MODE_CHECK,
    MODE_NOCHECK,
    MODE_SKIP,
    KernelState,
    _measure,
    _record,
    _throttle,
    compile_kernel,
    decide_groups,
)
from quotaflow.events import API_FETCH, API_PRODUCE
from quotaflow.pipeline.resolve import NO_TYPE, TYPE_CODE

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
NANOS_TO_PERCENT: Final = 100.0 / 1e9  # ClientRequestQuotaManager.NanosToPercentagePerSecond
_EXEMPT_KEYS: Final = np.array(sorted(EXEMPT_THROTTLE_API_KEYS), dtype=np.int16)


@dataclass(frozen=True, slots=True)
class WindowSettings:
    """``quota.window.num`` and ``quota.window.size.seconds``: Kafka's defaults are 11 × 1 s."""

    samples: int = 11
    window_seconds: int = 1

    @property
    def window_ms(self) -> int:
        return self.window_seconds * 1000


def _np(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    out: np.ndarray = col.to_numpy(zero_copy_only=False)
    return out


def group_offsets(keys: Sequence[pa.Array | pa.ChunkedArray]) -> I64:
    """Start offsets of the runs of equal key tuples in a sorted batch, plus the end (length G + 1)."""
    n = len(keys[0])
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    change = np.zeros(n - 1, dtype=bool)
    for k in keys:
        a = k.combine_chunks() if isinstance(k, pa.ChunkedArray) else k
        change |= _np(pc.not_equal(a.slice(1), a.slice(0, n - 1)))
    starts = np.flatnonzero(change) + 1
    return np.concatenate(([0], starts, [n])).astype(np.int64)


@dataclass(frozen=True, slots=True)
class KernelInputs:
    """One batch of one manager in the kernel's terms (records grouped by quota-id, time-ordered)."""

    offsets: I64
    first_keys: tuple[object, ...]
    last_keys: tuple[object, ...]
    bounds: F64
    ts: I64
    values: F64
    modes: npt.NDArray[np.int8]
    floor: I64


class GroupDriver:
    """One quota manager over a stream of sorted batches: carries the last group's state to the next batch."""

    def __init__(self, settings: WindowSettings, *, unrecord: bool, max_throttle_ms: int, compiled: bool = True):
        self.settings = settings
        self.unrecord = unrecord
        self.max_throttle_ms = max_throttle_ms
        self.compiled = compiled
        self._carry_key: tuple[object, ...] | None = None
        self._carry: KernelState | None = None

    def _state(self, x: KernelInputs) -> KernelState:
        groups = len(x.offsets) - 1
        state = KernelState.empty(max(groups, 1), self.settings.samples)
        if groups and self._carry is not None and x.first_keys == self._carry_key:
            for name in _STATE_FIELDS:
                getattr(state, name)[0] = getattr(self._carry, name)[0]
        return state

    def _keep(self, x: KernelInputs, state: KernelState) -> None:
        groups = len(x.offsets) - 1
        if groups:
            last = KernelState.empty(1, self.settings.samples)
            for name in _STATE_FIELDS:
                getattr(last, name)[0] = getattr(state, name)[groups - 1]
            self._carry, self._carry_key = last, x.last_keys

    def _decide(self, x: KernelInputs, state: KernelState, offsets: I64, sel: slice | I64) -> I64:
        s = self.settings
        return decide_groups(
            offsets, x.bounds, x.ts[sel], x.values[sel], x.modes[sel], x.floor[sel], self.unrecord, s.samples,
            s.window_ms, self.max_throttle_ms, state, compiled=self.compiled,
        )  # fmt: skip

    def run(self, x: KernelInputs) -> I64:
        """Kernel decisions (this manager's own throttle per record) for one batch."""
        state = self._state(x)
        own = self._decide(x, state, x.offsets, slice(None))
        self._keep(x, state)
        return own

    def run_windows(self, x: KernelInputs, window_ms: int = 1000) -> tuple[I64, WindowStats]:
        """Like :meth:`run`, and per (group, aligned window) the usage, throttles and the windowed rate read
        right after the window's last record (a non-mutating read, so decisions are unchanged).

        The batch is cut into rounds: round r holds every group's r-th window, so the kernel state after a round
        is each group's state at the end of that window."""
        n = len(x.ts)
        group = np.repeat(np.arange(len(x.offsets) - 1), np.diff(x.offsets))
        wstart = x.ts // window_ms * window_ms
        new_seg = np.ones(n, dtype=bool)
        if n:
            new_seg[1:] = (group[1:] != group[:-1]) | (wstart[1:] != wstart[:-1])
        seg = np.cumsum(new_seg) - 1
        seg_first = np.flatnonzero(new_seg)
        round_of_seg = np.arange(len(seg_first)) - np.searchsorted(seg_first, x.offsets[group[seg_first]])
        rnd = round_of_seg[seg]
        order = np.argsort(rnd, kind="stable")
        state = self._state(x)
        own = np.zeros(n, dtype=np.int64)
        rates = np.zeros(len(seg_first), dtype=np.float64)
        bounds_r = np.searchsorted(rnd[order], np.arange(int(rnd.max()) + 2 if n else 1))
        for r in range(len(bounds_r) - 1):
            rows = order[bounds_r[r] : bounds_r[r + 1]]
            offsets = np.searchsorted(group[rows], np.arange(len(x.offsets))).astype(np.int64)
            own[rows] = self._decide(x, state, offsets, rows)
            ends = np.flatnonzero(np.diff(np.append(group[rows], -1)) != 0)  # last record of each group
            segs = seg[rows[ends]]
            rates[segs] = read_rates(state, group[rows[ends]], x.ts[rows[ends]], self.settings)
        self._keep(x, state)
        recorded = x.modes != MODE_SKIP
        stats = WindowStats(
            group=group[seg_first],
            window_start_ms=wstart[seg_first],
            value_sum=np.bincount(seg, weights=np.where(recorded, x.values, 0.0), minlength=len(seg_first)).astype(
                np.float64
            ),
            rate=rates,
            throttle_count=np.bincount(seg, weights=own > 0, minlength=len(seg_first)).astype(np.int64),
            throttle_ms_sum=np.bincount(seg, weights=own, minlength=len(seg_first)).astype(np.int64),
            recorded=np.bincount(seg, weights=recorded, minlength=len(seg_first)) > 0,
            last_ts_ms=x.ts[np.append(seg_first[1:], n) - 1] if n else np.zeros(0, dtype=np.int64),
        )
        return own, stats


_STATE_FIELDS: Final = ("value", "start", "last", "n", "current")


@dataclass(frozen=True, slots=True)
class WindowStats:
    """Per (group, aligned window) of one batch: index of the group, window start, sums and the read rate."""

    group: I64
    window_start_ms: I64
    value_sum: F64
    rate: F64
    throttle_count: I64
    throttle_ms_sum: I64
    recorded: npt.NDArray[np.bool_]
    last_ts_ms: I64


def _read_rates_loop(value: F64, start: I64, last: I64, n: I64, groups: I64, now: I64, samples: int,
                     window_ms: int, v: F64, s: I64, la: I64, nn: I64, out: F64) -> None:  # fmt: skip
    """``read_window(..., mutate=False).rate`` for many (group, time) pairs: each read on the scratch row
    ``v, s, la, nn`` (one group's copy, allocated by the caller: the compiled loop allocates nothing)."""
    for i in range(groups.shape[0]):
        g = groups[i]
        t = now[i]
        for j in range(value.shape[1]):
            v[0, j] = value[g, j]
            s[0, j] = start[g, j]
            la[0, j] = last[g, j]
        nn[0] = n[g]
        if nn[0] == 0:  # SampledStat.oldest creates a sample when there is none
            v[0, 0] = 0.0
            s[0, 0] = t
            la[0, 0] = t
            nn[0] = 1
        total, w = _measure(v, s, la, nn, 0, samples * window_ms, samples, window_ms, t)
        out[i] = total / (w / 1000.0)


_read_rates_compiled: Callable[..., None] | None = None


def read_rates(state: KernelState, groups: I64, now_ms: I64, settings: WindowSettings, compiled: bool = True) -> F64:
    """The engine's ``read_window(...).rate`` (non-mutating) for each (group, time), compiled like the kernel."""
    global _read_rates_compiled
    loop: Callable[..., None] = _read_rates_loop
    if compiled and HAVE_NUMBA:
        if _read_rates_compiled is None:
            _read_rates_compiled = compile_kernel(_read_rates_loop)
        loop = _read_rates_compiled
    out = np.zeros(len(groups), dtype=np.float64)
    slots = state.value.shape[1]
    scratch = (np.empty((1, slots)), np.empty((1, slots), np.int64), np.empty((1, slots), np.int64),
               np.empty(1, np.int64))  # fmt: skip
    loop(state.value, state.start, state.last, state.n, np.ascontiguousarray(groups, dtype=np.int64),
         np.ascontiguousarray(now_ms, dtype=np.int64), settings.samples, settings.window_ms, *scratch, out)  # fmt: skip
    return out


def _bounds(limit: pa.Array | pa.ChunkedArray, offsets: I64) -> F64:
    lim = _np(pc.fill_null(limit, UNLIMITED)).astype(np.float64)
    return lim[offsets[:-1]] if len(lim) else np.zeros(0, dtype=np.float64)


def _keys_at(keys: Sequence[pa.Array | pa.ChunkedArray], i: int) -> tuple[object, ...]:
    return tuple(k[i].as_py() for k in keys)


def exempt_from_request_quota(api: npt.NDArray[np.int16], acks: npt.NDArray[np.int8],
                               follower: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:  # fmt: skip
    """KIP-124 exemptions known from an event: exempt-throttle APIs, follower fetches, produce with acks=0
    (``acks`` with nulls filled by any value other than 0)."""
    exempt: npt.NDArray[np.bool_] = np.isin(api, _EXEMPT_KEYS) | follower | ((api == PRODUCE_API_KEY) & (acks == 0))
    return exempt


def request_exempt(batch: pa.RecordBatch | pa.Table) -> npt.NDArray[np.bool_]:
    """:func:`exempt_from_request_quota` of an Arrow batch."""
    return exempt_from_request_quota(
        _np(batch.column("api_key")), _np(pc.fill_null(batch.column("acks"), 1)),
        _np(batch.column("is_follower")).astype(bool),
    )  # fmt: skip


class RequestPass:
    """KIP-124 request quota over batches sorted by (broker, request_qid, ts_ms, seq)."""

    KEYS: Final = ("broker", "request_qid")

    def __init__(self, settings: WindowSettings, compiled: bool = True) -> None:
        self.driver = request_driver(settings, compiled)

    def inputs(self, batch: pa.RecordBatch | pa.Table) -> KernelInputs:
        """Two records per request (io time checked, then network time unchecked), same timestamp."""
        n = batch.num_rows
        keys = [batch.column(k) for k in self.KEYS]
        off = group_offsets(keys)
        ts = _np(batch.column("ts_ms")).astype(np.int64)
        skip = request_exempt(batch) | ~_np(batch.column("request_enabled")).astype(bool)
        values = np.empty(2 * n, dtype=np.float64)
        values[0::2] = _np(batch.column("io_thread_ns")) * NANOS_TO_PERCENT
        values[1::2] = _np(batch.column("network_thread_ns")) * NANOS_TO_PERCENT
        modes = np.empty(2 * n, dtype=np.int8)
        modes[0::2] = np.where(skip, MODE_SKIP, MODE_CHECK)
        modes[1::2] = np.where(skip, MODE_SKIP, MODE_NOCHECK)
        return KernelInputs(
            off * 2, _keys_at(keys, 0), _keys_at(keys, n - 1), _bounds(batch.column("request_limit"), off),
            np.repeat(ts, 2), values, modes, np.zeros(2 * n, dtype=np.int64),
        )  # fmt: skip

    def __call__(self, batch: pa.RecordBatch | pa.Table) -> I64:
        if batch.num_rows == 0:
            return np.zeros(0, dtype=np.int64)
        return self.driver.run(self.inputs(batch))[0::2]

    def windows(self, batch: pa.RecordBatch | pa.Table) -> tuple[I64, WindowStats | None]:
        """(throttle_ms_request per row, per-window stats; groups index the batch's group runs)."""
        if batch.num_rows == 0:
            return np.zeros(0, dtype=np.int64), None
        own, stats = self.driver.run_windows(self.inputs(batch))
        return own[0::2], stats


def byte_type(batch: pa.RecordBatch | pa.Table) -> npt.NDArray[np.int8]:
    """:func:`byte_types` of an Arrow batch."""
    return byte_types(_np(batch.column("api_key")), _np(batch.column("is_follower")).astype(bool))


def byte_types(api: npt.NDArray[np.int16], follower: npt.NDArray[np.bool_]) -> npt.NDArray[np.int8]:
    """0 produce, 1 consumer fetch, 3 neither (follower fetch, other APIs): which byte-rate manager records."""
    out = np.full(len(api), NO_TYPE, dtype=np.int8)
    out[api == API_PRODUCE] = TYPE_CODE["produce"]
    out[(api == API_FETCH) & ~follower] = TYPE_CODE["fetch"]
    return out


class BytePass:
    """KIP-55 produce and fetch quotas over batches sorted by (broker, byte_type, byte_qid, ts_ms, seq).

    Returns (throttle_ms_produce, throttle_ms_fetch) per row; needs ``throttle_ms_request`` on the batch."""

    KEYS: Final = ("broker", "byte_type", "byte_qid")
    TYPES: Final = (("produce", "request_bytes"), ("fetch", "response_bytes"))

    def __init__(self, settings: WindowSettings, compiled: bool = True) -> None:
        self.drivers = {name: byte_driver(name, settings, compiled) for name, _ in self.TYPES}

    def inputs(self, sub: pa.RecordBatch | pa.Table, value_col: str) -> KernelInputs:
        keys = [sub.column(k) for k in self.KEYS]
        off = group_offsets(keys)
        enabled = _np(sub.column("byte_enabled")).astype(bool)
        return KernelInputs(
            off, _keys_at(keys, 0), _keys_at(keys, sub.num_rows - 1), _bounds(sub.column("byte_limit"), off),
            _np(sub.column("ts_ms")).astype(np.int64), _np(sub.column(value_col)).astype(np.float64),
            np.where(enabled, MODE_CHECK, MODE_SKIP).astype(np.int8),
            _np(sub.column("throttle_ms_request")).astype(np.int64),
        )  # fmt: skip

    def _split(self, batch: pa.RecordBatch | pa.Table) -> list[tuple[str, str, I64, pa.RecordBatch | pa.Table]]:
        btype = _np(batch.column("byte_type"))
        out = []
        for name, value_col in self.TYPES:
            rows = np.flatnonzero(btype == TYPE_CODE[name])
            if len(rows):
                sub = batch if len(rows) == batch.num_rows else batch.take(pa.array(rows))
                out.append((name, value_col, rows, sub))
        return out

    def __call__(self, batch: pa.RecordBatch | pa.Table) -> tuple[I64, I64]:
        n = batch.num_rows
        result = {"produce": np.zeros(n, dtype=np.int64), "fetch": np.zeros(n, dtype=np.int64)}
        for name, value_col, rows, sub in self._split(batch):
            result[name][rows] = self.drivers[name].run(self.inputs(sub, value_col))
        return result["produce"], result["fetch"]

    def windows(self, batch: pa.RecordBatch | pa.Table) -> list[tuple[str, I64, I64, WindowStats]]:
        """Per byte type present: (type, batch rows, own throttle per row, per-window stats over those rows)."""
        out = []
        for name, value_col, rows, sub in self._split(batch):
            own, stats = self.drivers[name].run_windows(self.inputs(sub, value_col))
            out.append((name, rows, own, stats))
        return out


def byte_driver(name: str, settings: WindowSettings, compiled: bool = True) -> GroupDriver:
    """The produce or fetch manager: uncapped throttle; fetch un-records a throttled response."""
    return GroupDriver(settings, unrecord=name == "fetch", max_throttle_ms=-1, compiled=compiled)


def request_driver(settings: WindowSettings, compiled: bool = True) -> GroupDriver:
    """The request manager: throttle capped at one sample window (KIP-124)."""
    return GroupDriver(settings, unrecord=False, max_throttle_ms=settings.window_ms, compiled=compiled)


def applied(request_ms: I64, produce_ms: I64, fetch_ms: I64) -> I64:
    """The throttle the broker applies: the largest of the managers' (non-applicable ones are 0)."""
    return np.maximum(np.maximum(request_ms, produce_ms), fetch_ms)


# -- whole datasets as numpy arrays (replay, and one Spark partition holding whole quota-ids) --------------------
@dataclass(frozen=True, slots=True)
class ManagerView:
    """One quota manager's view of each row: dense quota-id, kernel bound (null limit = ``UNLIMITED``) and whether
    the manager records at all (``quotaTypesEnabled``)."""

    qid: I64
    bound: F64
    enabled: npt.NDArray[np.bool_]

    @classmethod
    def of_resolution(cls, res: pa.Table, quota_type: str) -> ManagerView:
        """Per resolution row (one distinct (user, client_id) pair of :func:`~.resolve.resolve_clients`)."""
        return cls(
            _np(res.column(f"{quota_type}_qid")).astype(np.int64),
            _np(pc.fill_null(res.column(f"{quota_type}_limit"), UNLIMITED)).astype(np.float64),
            _np(res.column(f"{quota_type}_enabled")).astype(bool),
        )


@dataclass(frozen=True, slots=True)
class RequestRows:
    """The columns the decisions read, one entry per request row; ``broker`` is any dense integer code."""

    broker: I64
    ts_ms: I64
    seq: I64
    api_key: npt.NDArray[np.int16]
    acks: npt.NDArray[np.int8]  # nulls filled with 1 (only acks=0 matters)
    is_follower: npt.NDArray[np.bool_]
    request_bytes: I64
    response_bytes: I64
    io_thread_ns: I64
    network_thread_ns: I64

    def take(self, idx: I64) -> RequestRows:
        return RequestRows(*(getattr(self, f.name)[idx] for f in fields(self)))

    @classmethod
    def of_arrow(cls, batch: pa.RecordBatch | pa.Table, broker: I64) -> RequestRows:
        def col(name: str) -> np.ndarray:
            return _np(batch.column(name))

        return cls(
            broker, col("ts_ms").astype(np.int64, copy=False), col("seq").astype(np.int64, copy=False), col("api_key"),
            _np(pc.fill_null(batch.column("acks"), 1)), col("is_follower").astype(bool, copy=False),
            col("request_bytes"), col("response_bytes"), col("io_thread_ns"), col("network_thread_ns"),
        )  # fmt: skip


def codes(col: pa.Array | pa.ChunkedArray) -> tuple[I64, pa.Array]:
    """(dense integer code per row, the distinct values): a dictionary column's own indices, else hashed once."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()  # one dictionary for all chunks
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    return col.indices.to_numpy(zero_copy_only=False).astype(np.int64), col.dictionary


def time_order(ts_ms: I64, seq: I64) -> I64 | None:
    """Row order by (ts_ms, seq), or None when the rows already come that way (generated and logged data do)."""
    if len(ts_ms) < 2:
        return None
    dt = np.diff(ts_ms)
    if bool(np.all((dt > 0) | ((dt == 0) & (np.diff(seq) > 0)))):
        return None
    return np.lexsort((seq, ts_ms)).astype(np.int64, copy=False)


def group_order(key: I64, timeline: I64 | None) -> I64:
    """Rows grouped by ``key`` (dense, ≥ 0), each group in timeline order (``None``: row order).

    A stable sort keeps the timeline inside each group; keys that fit 16 bits sort by radix in O(n)."""
    k = key if timeline is None else key[timeline]
    small = len(k) == 0 or int(k.max()) < 1 << 16
    order = np.argsort(k.astype(np.uint16) if small else k, kind="stable").astype(np.int64, copy=False)
    return order if timeline is None else timeline[order]


def _rows_loop(part: int, part_of: I64, combo: npt.NDArray[np.int32], ts: I64, exempt: npt.NDArray[np.bool_],
               btype: npt.NDArray[np.int8], io_ns: I64, net_ns: I64, req_bytes: I64, resp_bytes: I64, group: I64,
               bound: F64,
               enabled: npt.NDArray[np.bool_], samples: int, window_ms: int,
               value: F64, start: I64, last: I64, n: I64, current: I64, out: I64) -> None:  # fmt: skip
    """All three managers over rows in (ts_ms, seq) order, one row at a time (the passes of :class:`RequestPass`
    and :class:`BytePass` fused): per row the request quota records io-thread time with a check and network-thread
    time without, then produce records ``request_bytes`` or a consumer fetch ``response_bytes`` with the request
    throttle as floor for un-recording. A row's ``combo`` is its (broker, user, client_id); manager ``m`` (0
    request, 1 produce, 2 fetch) keeps its windowed sum for that combo in state row ``group[m, combo]`` (one row per
    (broker, quota-id)) with quota ``bound[m, combo]`` and flag ``enabled[m, combo]``. ``out[m, r]`` is manager
    m's own throttle. Only rows of combos with ``part_of[combo] == part`` are decided (threads split rows so)."""
    slots = samples + 1
    age = samples * window_ms
    for r in range(ts.shape[0]):
        k = combo[r]
        if part_of[k] != part:
            continue
        t = ts[r]
        req_ms = 0
        if not exempt[r] and enabled[0, k]:
            g = group[0, k]
            _record(value, start, last, n, current, g, slots, window_ms, io_ns[r] * NANOS_TO_PERCENT, t)
            q = bound[0, k]
            if q != math.inf:
                total, w = _measure(value, start, last, n, g, age, samples, window_ms, t)
                rate = total / (w / 1000.0)
                if not rate <= q:
                    req_ms = _throttle(rate, q, w, window_ms)
            _record(value, start, last, n, current, g, slots, window_ms, net_ns[r] * NANOS_TO_PERCENT, t)
        out[0, r] = req_ms
        bt = btype[r]
        if bt == NO_TYPE:
            continue
        m = 1 + bt  # byte_types codes produce 0, fetch 1; managers here are request 0, produce 1, fetch 2
        if not enabled[m, k]:
            continue
        g = group[m, k]
        x = float(req_bytes[r] if m == 1 else resp_bytes[r])
        _record(value, start, last, n, current, g, slots, window_ms, x, t)
        own = 0
        q = bound[m, k]
        if q != math.inf:
            total, w = _measure(value, start, last, n, g, age, samples, window_ms, t)
            rate = total / (w / 1000.0)
            if not rate <= q:
                own = _throttle(rate, q, w, -1)
        out[m, r] = own
        if m == 2 and max(own, req_ms) > 0:
            _record(value, start, last, n, current, g, slots, window_ms, -x, t)


_rows_compiled: Callable[..., None] | None = None
MANAGERS: Final = ("request", "produce", "fetch")


@dataclass(frozen=True, slots=True)
class Combos:
    """The distinct (broker, pair) of a set of rows: each row's combo, and per manager and combo the state row
    (dense over the (broker, quota-id) present, so state grows with what the rows use, not brokers × quota-ids),
    quota and enabled flag."""

    combo: npt.NDArray[np.int32]
    group: I64  # [3, C]
    bound: F64  # [3, C]
    enabled: npt.NDArray[np.bool_]  # [3, C]
    broker: I64  # [C]
    pair: I64  # [C]
    groups: int

    @classmethod
    def of(cls, broker: I64, pair: I64, views: dict[str, ManagerView]) -> Combos:
        pairs = max(len(views["request"].qid), 1)
        codes = pc.dictionary_encode(pa.array(broker.astype(np.int64) * pairs + pair))
        distinct = codes.dictionary.to_numpy()
        cb, cp = distinct // pairs, distinct % pairs
        group = np.zeros((3, len(distinct)), dtype=np.int64)
        used = 0
        for m, name in enumerate(MANAGERS):
            qid = views[name].qid[cp]
            keys, dense = np.unique(cb * (int(qid.max(initial=0)) + 1) + qid, return_inverse=True)
            group[m] = used + dense.reshape(-1)
            used += len(keys)
        return cls(
            codes.indices.to_numpy(), group, np.stack([views[m].bound[cp] for m in MANAGERS]).astype(np.float64),
            np.stack([views[m].enabled[cp] for m in MANAGERS]).astype(bool), cb, cp, used,
        )  # fmt: skip


def decide_rows(rows: RequestRows, pair: I64, views: dict[str, ManagerView], settings: WindowSettings,
                compiled: bool = True, threads: int = 1,
                component: I64 | None = None) -> tuple[I64, I64, I64, I64]:  # fmt: skip
    """(throttle_ms_produce, throttle_ms_fetch, throttle_ms_request, throttle_ms) for every row of whole quota-ids.

    ``pair`` is each row's index into ``views`` (each manager's view per resolved (user, client_id)). One compiled
    loop over the rows in (ts_ms, seq) order decides all three managers per row (:func:`_rows_loop`): no grouping
    sort, no per-manager arrays. Rows that arrive out of order (a shuffled Spark partition) are put in order once.
    With ``component`` (per pair: pairs sharing a quota-id share it) rows are split over ``threads`` threads by
    (broker, component), which keeps every quota-id in one thread; the loop releases the GIL."""
    global _rows_compiled
    n = len(rows.ts_ms)
    timeline = time_order(rows.ts_ms, rows.seq)
    if timeline is not None:
        rows, pair = rows.take(timeline), pair[timeline]
    combos = Combos.of(rows.broker, pair, views)
    state = KernelState.empty(max(combos.groups, 1), settings.samples)
    out = np.zeros((3, n), dtype=np.int64)
    parts = max(1, threads if component is not None else 1)
    comp = np.zeros_like(combos.pair) if component is None else component[combos.pair]
    part_of = (combos.broker * 1_000_003 + comp) % parts
    exempt = exempt_from_request_quota(rows.api_key, rows.acks, rows.is_follower)
    btype = byte_types(rows.api_key, rows.is_follower)
    loop: Callable[..., None] = _rows_loop
    if compiled and HAVE_NUMBA:
        if _rows_compiled is None:
            _rows_compiled = compile_kernel(_rows_loop)
        loop = _rows_compiled
    i64 = np.int64
    columns = ((part_of, i64), (combos.combo, np.int32), (rows.ts_ms, i64), (exempt, np.bool_), (btype, np.int8),
               (rows.io_thread_ns, i64), (rows.network_thread_ns, i64), (rows.request_bytes, i64),
               (rows.response_bytes, i64))  # fmt: skip
    args = (*(_contiguous(a, t) for a, t in columns), combos.group, combos.bound, combos.enabled,
            settings.samples, settings.window_ms, state.value, state.start, state.last, state.n, state.current,
            out)  # fmt: skip
    _each(lambda k: loop(k, *args), [(k,) for k in range(parts)], parts)
    req, produce, fetch = out[0], out[1], out[2]
    result = (produce, fetch, req, applied(req, produce, fetch))
    if timeline is None:
        return result
    back = np.empty(n, dtype=np.int64)
    back[timeline] = np.arange(n)
    return (result[0][back], result[1][back], result[2][back], result[3][back])


def _contiguous(a: np.ndarray, dtype: type) -> np.ndarray:
    """``a`` as a contiguous array of ``dtype``, copied only when it is not one already."""
    return np.ascontiguousarray(a, dtype=dtype)


def _each(fn: Callable[..., None], items: Sequence[tuple[object, ...]], threads: int) -> None:
    """``fn(*item)`` for every item, on ``threads`` threads (the kernel and numpy release the GIL)."""
    if threads <= 1 or len(items) <= 1:
        for item in items:
            fn(*item)
        return
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for f in [pool.submit(fn, *item) for item in items]:
            f.result()
