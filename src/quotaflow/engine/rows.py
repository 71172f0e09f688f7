"""All three client-quota managers of a broker over a time-ordered stream of requests, in one compiled loop.

The bulk twin of the per-request path (``ClientQuotaManager`` for request, produce and fetch; KIP-55, KIP-124):
per request the request quota records io-thread time with a check and network-thread time without one, then
produce records ``request_bytes`` or a consumer fetch records ``response_bytes``, taking the request throttle as
the floor for un-recording. State is explicit (a :class:`~quotaflow.engine.kernel.KernelState` row per
(broker, quota-id) and manager) and so are the per-window accumulators (:class:`OpenWindows`), so a caller can run
rows in chunks, in threads (disjoint state rows), or stop and resume. The same loop also yields each
(quota-id, aligned window)'s usage, throttles and the windowed rate read right after the window's last row, so
decisions and windows come from one pass over the rows. ``compiled=False`` runs the very same Python code.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from quotaflow.engine.client_quota import NANOS_TO_PERCENT
from quotaflow.engine.kernel import HAVE_NUMBA, KernelState, _jitable, _measure, _record, _throttle, compile_kernel
from quotaflow.engine.quota_type import NO_BYTE_TYPE
from quotaflow.engine.quota_utils import keeps_oversized_fetch

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

ALIGN_MS: Final = 1000
"""Window rows are per 1 s aligned window (``ts_ms // 1000 * 1000``)."""

# rows of OpenWindows.ints
_W_START, _W_COUNT, _W_MS, _W_LAST, _W_REC = 0, 1, 2, 3, 4


@_jitable
def _read_rate(value: F64, start: I64, last: I64, n: I64, g: int, t: int, samples: int, window_ms: int,
               v: F64, s: I64, la: I64, nn: I64) -> float:  # fmt: skip
    """``Rate.measure(t)`` of state row ``g`` without mutating it (the purge runs on the scratch row)."""
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
    return total / (w / 1000.0)


@_jitable
def _flush(g: int, wi: I64, wf: F64, value: F64, start: I64, last: I64, n: I64, samples: int, window_ms: int,
           v: F64, s: I64, la: I64, nn: I64, oi: I64, of: F64, k: int) -> int:  # fmt: skip
    """Close state row ``g``'s open window into output row ``k`` when anything was recorded in it; next free row."""
    if wi[_W_REC, g] == 0:
        return k
    oi[0, k] = g
    oi[1, k] = wi[_W_START, g]
    oi[2, k] = wi[_W_COUNT, g]
    oi[3, k] = wi[_W_MS, g]
    of[0, k] = wf[g]
    of[1, k] = _read_rate(value, start, last, n, g, wi[_W_LAST, g], samples, window_ms, v, s, la, nn)
    return k + 1


@_jitable
def _touch(g: int, t: int, wi: I64, wf: F64, value: F64, start: I64, last: I64, n: I64, samples: int,
           window_ms: int, v: F64, s: I64, la: I64, nn: I64, oi: I64, of: F64, k: int) -> int:  # fmt: skip
    """A row of state row ``g`` at ``t``: a new aligned window closes the previous one (read before this row)."""
    ws = t - t % ALIGN_MS
    if wi[_W_START, g] != ws:
        if wi[_W_START, g] >= 0:
            k = _flush(g, wi, wf, value, start, last, n, samples, window_ms, v, s, la, nn, oi, of, k)
        wi[_W_START, g] = ws
        wi[_W_COUNT, g] = 0
        wi[_W_MS, g] = 0
        wi[_W_REC, g] = 0
        wf[g] = 0.0
    wi[_W_LAST, g] = t
    return k


def _rows_loop(part: int, part_of: I64, lo: int, hi: int, combo: npt.NDArray[np.int32], ts: I64,
               exempt: npt.NDArray[np.bool_], btype: npt.NDArray[np.int8], io_ns: I64, net_ns: I64, req_bytes: I64,
               resp_bytes: I64, group: I64, bound: F64, enabled: npt.NDArray[np.bool_], samples: int,
               window_ms: int, value: F64, start: I64, last: I64, n: I64, current: I64, out: I64, track: bool,
               wi: I64, wf: F64, v: F64, s: I64, la: I64, nn: I64, oi: I64, of: F64) -> int:  # fmt: skip
    """Rows ``[lo, hi)`` whose combo is in thread part ``part``; returns the number of window rows closed."""
    slots = samples + 1
    age = samples * window_ms
    k = 0
    for r in range(lo, hi):
        c = combo[r]
        if part_of[c] != part:
            continue
        t = ts[r]
        req_ms = 0
        g = group[0, c]
        if track:
            k = _touch(g, t, wi, wf, value, start, last, n, samples, window_ms, v, s, la, nn, oi, of, k)
        if not exempt[r] and enabled[0, c]:
            io = io_ns[r] * NANOS_TO_PERCENT
            net = net_ns[r] * NANOS_TO_PERCENT
            _record(value, start, last, n, current, g, slots, window_ms, io, t)
            q = bound[0, c]
            if q != math.inf:
                total, w = _measure(value, start, last, n, g, age, samples, window_ms, t)
                rate = total / (w / 1000.0)
                if not rate <= q:
                    req_ms = _throttle(rate, q, w, window_ms)
            _record(value, start, last, n, current, g, slots, window_ms, net, t)
            if track:
                wf[g] += io
                wf[g] += net
                wi[_W_REC, g] = 1
                wi[_W_MS, g] += req_ms  # a zero quota's throttle truncates to -1 (Kafka's .toInt): summed as is
                if req_ms > 0:
                    wi[_W_COUNT, g] += 1
        out[0, r] = req_ms
        out[3, r] = req_ms
        bt = btype[r]
        if bt == NO_BYTE_TYPE:
            continue
        m = 1 + bt  # managers: request 0, produce 1, fetch 2
        g = group[m, c]
        if track:
            k = _touch(g, t, wi, wf, value, start, last, n, samples, window_ms, v, s, la, nn, oi, of, k)
        if not enabled[m, c]:
            continue
        x = float(req_bytes[r] if m == 1 else resp_bytes[r])
        _record(value, start, last, n, current, g, slots, window_ms, x, t)
        own = 0
        q = bound[m, c]
        total, w = 0.0, 1
        if q != math.inf:
            total, w = _measure(value, start, last, n, g, age, samples, window_ms, t)
            rate = total / (w / 1000.0)
            if not rate <= q:
                own = _throttle(rate, q, w, -1)
        out[m, r] = own
        if own > req_ms:
            out[3, r] = own
        # a throttled fetch is un-recorded, unless it is too large for the window from a consumer within its quota
        if m == 2 and max(own, req_ms) > 0 and not (
                q != math.inf and keeps_oversized_fetch(x, total, w, q, samples, window_ms)):
            _record(value, start, last, n, current, g, slots, window_ms, -x, t)
        if track:
            wf[g] += x
            wi[_W_REC, g] = 1
            wi[_W_MS, g] += own
            if own > 0:
                wi[_W_COUNT, g] += 1
    return k


def _close_loop(wi: I64, wf: F64, value: F64, start: I64, last: I64, n: I64, samples: int, window_ms: int,
                v: F64, s: I64, la: I64, nn: I64, oi: I64, of: F64) -> int:  # fmt: skip
    k = 0
    for g in range(wi.shape[1]):
        if wi[_W_START, g] >= 0:
            k = _flush(g, wi, wf, value, start, last, n, samples, window_ms, v, s, la, nn, oi, of, k)
            wi[_W_START, g] = -1
    return k


def _rates_loop(value: F64, start: I64, last: I64, n: I64, groups: I64, now: I64, samples: int, window_ms: int,
                v: F64, s: I64, la: I64, nn: I64, out: F64) -> None:  # fmt: skip
    for i in range(groups.shape[0]):
        out[i] = _read_rate(value, start, last, n, groups[i], now[i], samples, window_ms, v, s, la, nn)


_compiled: dict[str, Callable[..., Any]] = {}
_LOOPS: Final[dict[str, Callable[..., Any]]] = {"rows": _rows_loop, "close": _close_loop, "rates": _rates_loop}


def _loop(name: str, compiled: bool) -> Callable[..., Any]:
    if not (compiled and HAVE_NUMBA):
        return _LOOPS[name]
    if name not in _compiled:
        _compiled[name] = compile_kernel(_LOOPS[name])
    return _compiled[name]


def _scratch(slots: int) -> tuple[F64, I64, I64, I64]:
    """One state row's copy, for non-mutating reads (the compiled loops allocate nothing)."""
    return np.empty((1, slots)), np.empty((1, slots), np.int64), np.empty((1, slots), np.int64), np.empty(1, np.int64)


@dataclass(frozen=True, slots=True)
class ClosedWindows:
    """Window rows: state row (= manager × broker × quota-id), aligned start, value recorded (bytes, or percent of a
    thread for the request quota: io + network), the rate read after the window's last row, and the count and
    sum of that manager's own throttles in the window."""

    group: I64
    window_start_ms: I64
    value_sum: F64
    rate: F64
    throttle_count: I64
    throttle_ms_sum: I64

    @classmethod
    def of(cls, oi: I64, of: F64, k: int) -> ClosedWindows:
        return cls(oi[0, :k].copy(), oi[1, :k].copy(), of[0, :k].copy(), of[1, :k].copy(), oi[2, :k].copy(),
                   oi[3, :k].copy())  # fmt: skip

    @classmethod
    def concat(cls, parts: list[ClosedWindows]) -> ClosedWindows:
        names = ("group", "window_start_ms", "value_sum", "rate", "throttle_count", "throttle_ms_sum")
        if not parts:
            i, f = np.zeros(0, np.int64), np.zeros(0, np.float64)
            return cls(i, i, f, f, i, i)
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in names))


@dataclass
class OpenWindows:
    """Per state row, the window being accumulated: start (-1: none), throttle count and ms, last row's time,
    whether anything was recorded (ints ``[5, G]``), and the value recorded (``sums[G]``)."""

    ints: I64
    sums: F64

    @classmethod
    def empty(cls, groups: int) -> OpenWindows:
        ints = np.zeros((5, groups), dtype=np.int64)
        ints[_W_START] = -1
        return cls(ints, np.zeros(groups, dtype=np.float64))


@dataclass(frozen=True, slots=True)
class RequestColumns:
    """Per row (in (ts_ms, seq) order): combo index, time, request-quota exemption, byte type (0 produce,
    1 consumer fetch, :data:`NO_BYTE_TYPE`), thread times and bytes. Contiguous arrays of the loop's types."""

    combo: npt.NDArray[np.int32]
    ts_ms: I64
    exempt: npt.NDArray[np.bool_]
    btype: npt.NDArray[np.int8]
    io_thread_ns: I64
    network_thread_ns: I64
    request_bytes: I64
    response_bytes: I64

    @classmethod
    def of(cls, combo: np.ndarray, ts_ms: np.ndarray, exempt: np.ndarray, btype: np.ndarray,
           io_thread_ns: np.ndarray, network_thread_ns: np.ndarray, request_bytes: np.ndarray,
           response_bytes: np.ndarray) -> RequestColumns:  # fmt: skip
        c = np.ascontiguousarray
        return cls(c(combo, np.int32), c(ts_ms, np.int64), c(exempt, np.bool_), c(btype, np.int8),
                   c(io_thread_ns, np.int64), c(network_thread_ns, np.int64), c(request_bytes, np.int64),
                   c(response_bytes, np.int64))  # fmt: skip


@dataclass(frozen=True, slots=True)
class ComboQuotas:
    """Per manager (0 request, 1 produce, 2 fetch) and combo (a row's (broker, user, client_id)): state row,
    quota (``math.inf``: no quota, recorded but never checked) and whether the manager records at all."""

    group: I64  # [3, C]
    bound: F64  # [3, C]
    enabled: npt.NDArray[np.bool_]  # [3, C]


def decide_rows(rows: RequestColumns, quotas: ComboQuotas, samples: int, window_ms: int, state: KernelState,
                out: I64, *, lo: int = 0, hi: int | None = None, part: int = 0, part_of: I64 | None = None,
                windows: OpenWindows | None = None, compiled: bool = True) -> ClosedWindows | None:  # fmt: skip
    """Decide rows ``[lo, hi)`` in order; ``out[m, r]`` gets manager m's own throttle (0 request, 1 produce,
    2 fetch) and ``out[3, r]`` the applied one (the largest of them). With ``part_of`` (per combo) only the
    combos of thread part ``part`` are decided, so threads can split rows over disjoint state rows (the loop
    releases the GIL). With ``windows`` the windows that the rows close are returned (:func:`close_windows`
    closes the rest)."""
    hi = len(rows.ts_ms) if hi is None else hi
    if part_of is None:
        part_of = np.zeros(quotas.group.shape[1], dtype=np.int64)
    track = windows is not None
    if windows is None:
        windows = OpenWindows.empty(0)
    cap = 2 * max(hi - lo, 0) if track else 0
    oi, of = np.zeros((4, cap), dtype=np.int64), np.zeros((2, cap), dtype=np.float64)
    k = _loop("rows", compiled)(
        part, part_of, lo, hi, rows.combo, rows.ts_ms, rows.exempt, rows.btype, rows.io_thread_ns,
        rows.network_thread_ns, rows.request_bytes, rows.response_bytes, quotas.group, quotas.bound, quotas.enabled,
        samples, window_ms, state.value, state.start, state.last, state.n, state.current, out, track, windows.ints,
        windows.sums, *_scratch(samples + 1), oi, of,
    )  # fmt: skip
    return ClosedWindows.of(oi, of, int(k or 0)) if track else None


def close_windows(windows: OpenWindows, state: KernelState, samples: int, window_ms: int,
                  compiled: bool = True) -> ClosedWindows:  # fmt: skip
    """Close every open window (end of the rows): each rate is read at its window's last row."""
    cap = windows.ints.shape[1]
    oi, of = np.zeros((4, cap), dtype=np.int64), np.zeros((2, cap), dtype=np.float64)
    k = _loop("close", compiled)(windows.ints, windows.sums, state.value, state.start, state.last, state.n, samples,
                                 window_ms, *_scratch(samples + 1), oi, of)  # fmt: skip
    return ClosedWindows.of(oi, of, int(k or 0))


def read_rates(state: KernelState, groups: I64, now_ms: I64, samples: int, window_ms: int,
               compiled: bool = True) -> F64:  # fmt: skip
    """``read_window(state, g, t, ...).rate`` (non-mutating) for many (group, time) pairs in one compiled call."""
    out = np.zeros(len(groups), dtype=np.float64)
    _loop("rates", compiled)(state.value, state.start, state.last, state.n, np.ascontiguousarray(groups, np.int64),
                             np.ascontiguousarray(now_ms, np.int64), samples, window_ms, *_scratch(samples + 1),
                             out)  # fmt: skip
    return out
