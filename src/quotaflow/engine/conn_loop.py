"""The array twin of :class:`~quotaflow.engine.conn_acceptor.AcceptorSimulation` for bulk replays of one broker.

The pipeline replays a broker's connections with a fixed configuration (listeners and IP quotas set before the
first connection), ~40 µs per connection through the object model. This loop makes the very same decisions over
explicit arrays: one acceptor per listener, FIFO, the smallest ``(time, row)`` candidate runs first (the head of an
idle acceptor's queue at ``max(arrival, free time)``, or a busy acceptor's IP check at ``process + delay``);
broker/listener rates give the acceptor delay, the per-IP rate (recreated after an hour idle) may throttle and roll
the connection back out of all three rates. Rate arithmetic is the kernel's (``engine.kernel``), compiled with numba
when available; ``compiled=False`` runs the same Python functions, with identical output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from quotaflow.engine.connection import IP_SENSOR_EXPIRATION_MS
from quotaflow.engine.kernel import HAVE_NUMBA, KernelState, _measure, _record, _throttle, compile_kernel

RESULT_ACCEPTED: Final = 0
RESULT_IP_THROTTLED: Final = 1

_IDLE: Final = -(1 << 62)

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]


def _conn_loop(ts: I64, lcode: I64, ipcode: I64, order: I64, loff: I64, bounds: F64, ip_checked: U8,
               protected: U8, samples: int, window_ms: int,
               value: F64, start: I64, last: I64, n: I64, current: I64, ip_last: I64, ip_seen: U8,
               qpos: I64, free_at: I64, pending: I64, pending_at: I64, pending_start: I64, pending_delay: I64,
               delay_out: I64, ip_out: I64, result_out: npt.NDArray[np.int8]) -> None:
    """Groups: 0 broker, ``1 + l`` listener l, ``1 + L + i`` ip i. ``order[loff[l]:loff[l+1]]`` = listener l's rows.
    Allocates nothing (compiled without numba's runtime): the acceptors' scratch arrays come from the caller."""
    n_l = loff.shape[0] - 1
    slots = samples + 1
    age = samples * window_ms
    while True:
        best_l = -1
        best_t = 0
        best_i = 0
        for lst in range(n_l):
            if pending[lst] >= 0:
                ct = pending_at[lst]
                ci = pending[lst]
            elif qpos[lst] < loff[lst + 1]:
                ci = order[qpos[lst]]
                ct = ts[ci] if ts[ci] > free_at[lst] else free_at[lst]
            else:
                continue
            if best_l < 0 or ct < best_t or (ct == best_t and ci < best_i):
                best_l, best_t, best_i = lst, ct, ci
        if best_l < 0:
            return
        lst, now, r = best_l, best_t, best_i
        gl = 1 + lst
        if pending[lst] < 0:  # step 1: broker (unless protected) and listener rates -> acceptor delay
            qpos[lst] += 1
            floor = 0
            if protected[lst] == 0:
                _record(value, start, last, n, current, 0, slots, window_ms, 1.0, now)
                total, w = _measure(value, start, last, n, 0, age, samples, window_ms, now)
                rate = total / (w / 1000.0)
                if not rate <= bounds[0]:
                    floor = _throttle(rate, bounds[0], w, window_ms)
            own = 0
            _record(value, start, last, n, current, gl, slots, window_ms, 1.0, now)
            total, w = _measure(value, start, last, n, gl, age, samples, window_ms, now)
            rate = total / (w / 1000.0)
            if not rate <= bounds[gl]:
                own = _throttle(rate, bounds[gl], w, window_ms)
            d = own if own > floor else floor
            if d < 0:
                d = 0
            pending[lst] = r
            pending_at[lst] = now + d
            pending_start[lst] = now
            pending_delay[lst] = d
            continue
        # step 2: the acceptor is free again; the per-IP rate at accept time
        pending[lst] = -1
        free_at[lst] = now
        delay_out[r] = pending_delay[lst]
        ip = ipcode[r]
        ip_out[r] = 0
        result_out[r] = RESULT_ACCEPTED
        if ip_checked[ip] == 0:
            continue
        gi = 1 + n_l + ip
        if ip_seen[ip] == 0 or now - ip_last[ip] > IP_SENSOR_EXPIRATION_MS:
            n[gi] = 0  # a new sensor: the next record starts its first sample
            ip_seen[ip] = 1
        ip_last[ip] = now
        _record(value, start, last, n, current, gi, slots, window_ms, 1.0, now)
        total, w = _measure(value, start, last, n, gi, age, samples, window_ms, now)
        rate = total / (w / 1000.0)
        thr = 0
        if not rate <= bounds[gi]:
            thr = _throttle(rate, bounds[gi], w, window_ms)
        if thr > 0:
            _record(value, start, last, n, current, gi, slots, window_ms, -1.0, now)
            _record(value, start, last, n, current, gl, slots, window_ms, -1.0, now)
            if protected[lst] == 0:
                _record(value, start, last, n, current, 0, slots, window_ms, -1.0, now)
            ip_out[r] = thr
            result_out[r] = RESULT_IP_THROTTLED


_compiled: Callable[..., None] | None = None


def _compiled_loop() -> Callable[..., None]:
    global _compiled
    if _compiled is None:
        _compiled = compile_kernel(_conn_loop)
    return _compiled


@dataclass(frozen=True, slots=True)
class ConnDecisions:
    """Per row: the acceptor delay, the IP throttle (0 unless throttled) and ``RESULT_*``."""

    accept_delay_ms: I64
    ip_throttle_ms: I64
    result: npt.NDArray[np.int8]


def decide_connections(ts_ms: I64, listener: I64, ip: I64, broker_bound: float, listener_bounds: F64,
                       listener_protected: U8, ip_quota: F64, ip_checked: U8, samples: int, window_ms: int,
                       *, compiled: bool = True) -> ConnDecisions:
    """Decide one broker's connections, rows in (ts_ms, seq) order.

    ``listener[r]`` / ``ip[r]`` index ``listener_bounds`` / ``listener_protected`` and ``ip_quota`` /
    ``ip_checked`` (0 when the IP has no rate quota: never recorded). All rates start empty.
    """
    rows = len(ts_ms)
    n_l, n_ip = len(listener_bounds), len(ip_quota)
    lcode = np.ascontiguousarray(listener, dtype=np.int64)
    order = np.argsort(lcode, kind="stable").astype(np.int64)
    loff = np.zeros(n_l + 1, dtype=np.int64)
    np.cumsum(np.bincount(lcode, minlength=n_l), out=loff[1:])
    bounds = np.concatenate(([float(broker_bound)], np.asarray(listener_bounds, np.float64),
                             np.asarray(ip_quota, np.float64)))
    st = KernelState.empty(1 + n_l + n_ip, samples)
    out = ConnDecisions(np.zeros(rows, np.int64), np.zeros(rows, np.int64), np.zeros(rows, np.int8))
    loop = _compiled_loop() if compiled and HAVE_NUMBA else _conn_loop
    loop(np.ascontiguousarray(ts_ms, dtype=np.int64), lcode, np.ascontiguousarray(ip, dtype=np.int64), order, loff,
         bounds, np.ascontiguousarray(ip_checked, dtype=np.uint8),
         np.ascontiguousarray(listener_protected, dtype=np.uint8), int(samples), int(window_ms),
         st.value, st.start, st.last, st.n, st.current, np.zeros(n_ip, np.int64), np.zeros(n_ip, np.uint8),
         loff[:-1].copy(), np.full(n_l, _IDLE, np.int64), np.full(n_l, -1, np.int64), np.zeros(n_l, np.int64),
         np.zeros(n_l, np.int64), np.zeros(n_l, np.int64),
         out.accept_delay_ms, out.ip_throttle_ms, out.result)
    return out
