"""Drivers of the engine's loops, shared by the Spark backtest and the single-process replay.

:func:`decide_rows` is what both jobs run: rows of whole quota-ids (all of replay's, or one Spark partition)
through the engine's fused loop (:mod:`quotaflow.engine.rows`), all three managers per row in (ts_ms, seq) order,
closing each (quota-id, 1 s window) on the way. :class:`RequestPass` and :class:`BytePass` are the same decisions
as per-batch drivers of the array kernel (``decide_groups``) over batches sorted by (group key, ts_ms, seq),
carrying the last quota-id's :class:`KernelState` row into the next batch (bounded memory per call; a test checks
they agree with :func:`decide_rows`):

* Request pass (KIP-124), key (broker, request quota-id): every request records io-thread time ×1e-7 % with a
  check, then network-thread time without one (same timestamp); exempt requests (KIP-124) and a disabled manager
  record nothing. Throttle capped at one sample window.
* Byte pass (KIP-55), key (broker, byte type, quota-id): produce records ``request_bytes``; consumer fetch records
  ``response_bytes`` with the request throttle as floor and un-records when the applied throttle is positive.
  Follower fetches and other APIs are not recorded. Applied ``throttle_ms`` = max over the managers that apply.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from quotaflow.core.keys import UNLIMITED
from quotaflow.engine import rows as rows_engine
from quotaflow.engine.client_quota import NANOS_TO_PERCENT
from quotaflow.engine.exempt import EXEMPT_THROTTLE_API_KEYS, PRODUCE_API_KEY
from quotaflow.engine.kernel import MODE_CHECK, MODE_NOCHECK, MODE_SKIP, KernelState, decide_groups
from quotaflow.engine.rows import ClosedWindows, ComboQuotas, RequestColumns
from quotaflow.engine.stats import DEFAULT_QUOTA_WINDOW_NUM, DEFAULT_QUOTA_WINDOW_SIZE_SECONDS
from quotaflow.events import API_FETCH, API_PRODUCE
from quotaflow.pipeline.resolve import NO_TYPE, TYPE_CODE

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
_EXEMPT_KEYS: Final = np.array(sorted(EXEMPT_THROTTLE_API_KEYS), dtype=np.int16)


@dataclass(frozen=True, slots=True)
class WindowSettings:
    """``quota.window.num`` and ``quota.window.size.seconds``: Kafka's defaults are 11 × 1 s."""

    samples: int = DEFAULT_QUOTA_WINDOW_NUM
    window_seconds: int = DEFAULT_QUOTA_WINDOW_SIZE_SECONDS

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


_STATE_FIELDS: Final = ("value", "start", "last", "n", "current")


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


def byte_driver(name: str, settings: WindowSettings, compiled: bool = True) -> GroupDriver:
    """The produce or fetch manager: uncapped throttle; fetch un-records a throttled response."""
    return GroupDriver(settings, unrecord=name == "fetch", max_throttle_ms=-1, compiled=compiled)


def request_driver(settings: WindowSettings, compiled: bool = True) -> GroupDriver:
    """The request manager: throttle capped at one sample window (KIP-124)."""
    return GroupDriver(settings, unrecord=False, max_throttle_ms=settings.window_ms, compiled=compiled)


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


MANAGERS: Final = ("request", "produce", "fetch")
CHUNK_ROWS: Final = 1 << 18
"""Rows per compiled call when windows are collected (bounds the closed-window buffers)."""


@dataclass(frozen=True, slots=True)
class Combos:
    """The distinct (broker, pair) of a set of rows: each row's combo, and per manager and combo the state row
    (dense over the (broker, quota-id) present, so state grows with what the rows use, not brokers × quota-ids),
    quota and enabled flag; ``starts[m]`` is manager m's first state row (``starts[3]`` = all of them)."""

    combo: npt.NDArray[np.int32]
    group: I64  # [3, C]
    bound: F64  # [3, C]
    enabled: npt.NDArray[np.bool_]  # [3, C]
    broker: I64  # [C]
    pair: I64  # [C]
    starts: I64  # [4]

    @property
    def groups(self) -> int:
        return int(self.starts[-1])

    @property
    def quotas(self) -> ComboQuotas:
        return ComboQuotas(self.group, self.bound, self.enabled)

    @classmethod
    def of(cls, broker: I64, pair: I64, views: dict[str, ManagerView]) -> Combos:
        pairs = max(len(views["request"].qid), 1)
        codes = pc.dictionary_encode(pa.array(broker.astype(np.int64) * pairs + pair))
        distinct = codes.dictionary.to_numpy()
        cb, cp = distinct // pairs, distinct % pairs
        group = np.zeros((3, len(distinct)), dtype=np.int64)
        starts = np.zeros(4, dtype=np.int64)
        for m, name in enumerate(MANAGERS):
            qid = views[name].qid[cp]
            keys, dense = np.unique(cb * (int(qid.max(initial=0)) + 1) + qid, return_inverse=True)
            group[m] = starts[m] + dense.reshape(-1)
            starts[m + 1] = starts[m] + len(keys)
        return cls(
            codes.indices.to_numpy().astype(np.int32), group,
            np.stack([views[m].bound[cp] for m in MANAGERS]).astype(np.float64),
            np.stack([views[m].enabled[cp] for m in MANAGERS]).astype(bool), cb, cp, starts,
        )  # fmt: skip

    def owner(self, groups: I64) -> tuple[I64, I64]:
        """(manager, one combo using it) of each state row."""
        rep = np.zeros(max(self.groups, 1), dtype=np.int64)
        for m in range(3):
            rep[self.group[m]] = np.arange(self.group.shape[1])
        manager = np.searchsorted(self.starts, groups, side="right") - 1
        return manager.astype(np.int64), rep[groups]


@dataclass(frozen=True, slots=True)
class Decided:
    """:func:`decide_rows`'s result: the four decision columns in the rows' order, and (when asked) the window
    rows with the combos that name their state rows."""

    throttle_ms_produce: I64
    throttle_ms_fetch: I64
    throttle_ms_request: I64
    throttle_ms: I64
    windows: ClosedWindows | None
    combos: Combos

    @property
    def columns(self) -> tuple[I64, I64, I64, I64]:
        return (self.throttle_ms_produce, self.throttle_ms_fetch, self.throttle_ms_request, self.throttle_ms)


def decide_rows(rows: RequestRows, pair: I64, views: dict[str, ManagerView], settings: WindowSettings,
                compiled: bool = True, threads: int = 1, component: I64 | None = None,
                windows: bool = False) -> Decided:  # fmt: skip
    """Throttles for every row of whole quota-ids (and with ``windows`` every (quota-id, 1 s window)'s row).

    ``pair`` is each row's index into ``views`` (each manager's view per resolved (user, client_id)). One compiled
    loop over the rows in (ts_ms, seq) order decides all three managers per row (:func:`.engine.rows.decide_rows`):
    no grouping sort, no per-manager arrays. Rows that arrive out of order (a shuffled Spark partition) are put in
    order once. With ``component`` (per pair: pairs sharing a quota-id share it) rows are split over ``threads``
    threads by (broker, component), which keeps every quota-id in one thread; the loop releases the GIL."""
    n = len(rows.ts_ms)
    timeline = time_order(rows.ts_ms, rows.seq)
    if timeline is not None:
        rows, pair = rows.take(timeline), pair[timeline]
    combos = Combos.of(rows.broker, pair, views)
    state = KernelState.empty(max(combos.groups, 1), settings.samples)
    out = np.zeros((4, n), dtype=np.int64)
    parts = max(1, threads if component is not None else 1)
    comp = np.zeros_like(combos.pair) if component is None else component[combos.pair]
    part_of = np.ascontiguousarray((combos.broker * 1_000_003 + comp) % parts, dtype=np.int64)
    columns = RequestColumns.of(
        combos.combo, rows.ts_ms, exempt_from_request_quota(rows.api_key, rows.acks, rows.is_follower),
        byte_types(rows.api_key, rows.is_follower), rows.io_thread_ns, rows.network_thread_ns, rows.request_bytes,
        rows.response_bytes,
    )  # fmt: skip
    open_windows = rows_engine.OpenWindows.empty(max(combos.groups, 1)) if windows else None
    closed: list[list[ClosedWindows]] = [[] for _ in range(parts)]
    step = CHUNK_ROWS if windows else max(n, 1)

    def run(k: int) -> None:
        for lo in range(0, n, step):
            got = rows_engine.decide_rows(columns, combos.quotas, settings.samples, settings.window_ms, state, out,
                                          lo=lo, hi=min(lo + step, n), part=k, part_of=part_of, windows=open_windows,
                                          compiled=compiled)  # fmt: skip
            if got is not None:
                closed[k].append(got)

    _each(run, [(k,) for k in range(parts)], parts)
    found: ClosedWindows | None = None
    if open_windows is not None:
        rest = rows_engine.close_windows(open_windows, state, settings.samples, settings.window_ms, compiled)
        found = ClosedWindows.concat([c for per in closed for c in per] + [rest])
    result = (out[1], out[2], out[0], out[3])
    if timeline is not None:
        back = np.empty(n, dtype=np.int64)
        back[timeline] = np.arange(n)
        result = (result[0][back], result[1][back], result[2][back], result[3][back])
    return Decided(*result, found, combos)


def _each(fn: Callable[..., None], items: Sequence[tuple[object, ...]], threads: int) -> None:
    """``fn(*item)`` for every item, on ``threads`` threads (the kernel and numpy release the GIL)."""
    if threads <= 1 or len(items) <= 1:
        for item in items:
            fn(*item)
        return
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for f in [pool.submit(fn, *item) for item in items]:
            f.result()
