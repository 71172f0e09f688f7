"""Engine benchmark: quota decisions per second, per-request path vs bulk kernel vs kafka-python's kafka.metrics.

One synthetic trace of N decisions (default 1M) over K quota-ids per quota type (default 10k users, each with a
user-level producer_byte_rate, consumer_byte_rate and request_percentage quota; 1–4 client-ids per user share it):
50 % produce, 30 % fetch (throttled fetches un-recorded), 20 % request time (capped at one window), Poisson
arrivals at ~10k decisions/s (≈ 100 s of traffic, ≈ 1 decision/s per quota-id and type).

    .venv/bin/python bench/engine.py [--events 1000000] [--ids 10000] [--kp-events N] [--repeat 3]

Reports ns per decision for (a) ClientQuotaManager.record_and_get_throttle_ms per request, (a') a bare
``Rate.record_and_throttle`` per request (what kafka-python's Sensor+Rate+Quota path corresponds to), (b) the
numba kernel over the whole trace (grouping cost reported separately), (c) kafka-python's Sensor + Rate + Quota on
the first ``--kp-events`` decisions of the same trace; the ratios; memory per active quota-id (tracemalloc). It
also checks that the per-request path and the kernel give identical throttles.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from quotaflow.engine import (
    MODE_CHECK,
    ClientQuotaManager,
    KernelState,
    QuotaType,
    Rate,
    decide_groups,
    nanos_to_percent,
    to_int32,
)
from quotaflow.engine.quota_utils import bounded_throttle_time, throttle_time

PRODUCE, FETCH, REQUEST = 0, 1, 2
SAMPLES, WINDOW_MS = 11, 1000
T0 = 1_700_000_000_000


@dataclass
class Trace:
    kind: npt.NDArray[np.int8]  # PRODUCE / FETCH / REQUEST
    user: npt.NDArray[np.int64]
    client: npt.NDArray[np.int64]
    ts: npt.NDArray[np.int64]
    value: npt.NDArray[np.float64]  # bytes, or request percent
    quota: npt.NDArray[np.float64]  # [kind, user] -> configured limit

    def __len__(self) -> int:
        return int(self.ts.shape[0])


def make_trace(events: int, ids: int, seed: int = 7) -> Trace:
    rng = np.random.default_rng(seed)
    kind = rng.choice(np.array([PRODUCE, FETCH, REQUEST], dtype=np.int8), size=events, p=[0.5, 0.3, 0.2])
    weights = rng.pareto(1.2, ids) + 1.0  # some users are much busier than others
    user = rng.choice(ids, size=events, p=weights / weights.sum()).astype(np.int64)
    client = rng.integers(0, 4, events).astype(np.int64)
    ts = T0 + np.cumsum(rng.exponential(1000.0 / 10_000, events)).astype(np.int64)  # ~10k decisions/s
    value = np.empty(events)
    sizes = rng.lognormal(9.0, 1.0, events)  # ~8 KB median
    value[kind == PRODUCE] = sizes[kind == PRODUCE]
    value[kind == FETCH] = 4 * sizes[kind == FETCH]
    req = kind == REQUEST
    value[req] = np.array([nanos_to_percent(int(ns)) for ns in rng.lognormal(14.0, 1.2, int(req.sum()))])
    # quota: about twice the user's mean rate, so bursts (and some heavy users) get throttled
    share = weights / weights.sum() * 10_000  # decisions/s per user
    quota = np.empty((3, ids))
    quota[PRODUCE] = np.maximum(2000.0, np.round(share * 0.5 * 13_400 * 2))
    quota[FETCH] = np.maximum(8000.0, np.round(share * 0.3 * 53_600 * 2))
    quota[REQUEST] = np.maximum(0.5, np.round(share * 0.2 * 0.25 * 2, 2))
    return Trace(kind, user, client, ts, value, quota)


def names(trace: Trace) -> tuple[list[str], list[str]]:
    users = [f"user-{u}" for u in range(trace.quota.shape[1])]
    return users, [f"client-{c}" for c in range(4)]


# -- (a) per-request ClientQuotaManager --------------------------------------------------------------------------------
def managers_for(trace: Trace) -> list[ClientQuotaManager]:
    users, _ = names(trace)
    ms = [ClientQuotaManager(t, SAMPLES, WINDOW_MS // 1000) for t in (QuotaType.PRODUCE, QuotaType.FETCH,
                                                                       QuotaType.REQUEST)]
    for k, m in enumerate(ms):
        for u, name in enumerate(users):
            m.update_quota(name, None, float(trace.quota[k, u]))
    return ms


def run_managers(trace: Trace, ms: list[ClientQuotaManager], n: int) -> list[int]:
    users, clients = names(trace)
    kinds, us, cs, tss, vals = (trace.kind[:n].tolist(), trace.user[:n].tolist(), trace.client[:n].tolist(),
                                trace.ts[:n].tolist(), trace.value[:n].tolist())
    produce, fetch, request = ms
    out = []
    append = out.append
    for k, u, c, t, v in zip(kinds, us, cs, tss, vals, strict=True):
        user, client = users[u], clients[c]
        if k == PRODUCE:
            append(produce.record_and_get_throttle_ms(user, client, v, t))
        elif k == FETCH:
            ms_ = fetch.record_and_get_throttle_ms(user, client, v, t)
            if ms_ > 0:
                fetch.unrecord(user, client, v, t)
            append(ms_)
        else:
            append(request.record_and_get_throttle_ms(user, client, v, t))
    return out


# -- (a') bare Rate per request ----------------------------------------------------------------------------------------
def run_rates(trace: Trace, n: int) -> list[int]:
    ids = trace.quota.shape[1]
    rates = [[Rate(SAMPLES, WINDOW_MS, float(trace.quota[k, u])) for u in range(ids)] for k in range(3)]
    caps = (None, None, WINDOW_MS)
    out = []
    for k, u, t, v in zip(trace.kind[:n].tolist(), trace.user[:n].tolist(), trace.ts[:n].tolist(),
                          trace.value[:n].tolist(), strict=True):
        r = rates[k][u]
        ms_ = to_int32(r.record_and_throttle(v, t, caps[k]))
        if k == FETCH and ms_ > 0:
            r.record(-v, t)
        out.append(ms_)
    return out


# -- (b) bulk kernel ---------------------------------------------------------------------------------------------------
@dataclass
class Grouped:
    order: npt.NDArray[np.int64]
    offsets: list[npt.NDArray[np.int64]]
    slices: list[slice]


def group(trace: Trace) -> Grouped:
    """Sort rows by (kind, user, time) and cut per-kind offset arrays (what a driver does before the kernel)."""
    ids = trace.quota.shape[1]
    order = np.lexsort((trace.ts, trace.user, trace.kind)).astype(np.int64)
    kind_sorted = trace.kind[order]
    user_sorted = trace.user[order]
    offsets, slices = [], []
    for k in range(3):
        lo, hi = np.searchsorted(kind_sorted, k, "left"), np.searchsorted(kind_sorted, k, "right")
        counts = np.bincount(user_sorted[lo:hi], minlength=ids)
        off = np.zeros(ids + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        offsets.append(off)
        slices.append(slice(int(lo), int(hi)))
    return Grouped(order, offsets, slices)


def run_kernel(trace: Trace, g: Grouped) -> npt.NDArray[np.int64]:
    ids = trace.quota.shape[1]
    out = np.zeros(len(trace), dtype=np.int64)
    ts, vals = trace.ts[g.order], trace.value[g.order]
    for k, cap in ((PRODUCE, -1), (FETCH, -1), (REQUEST, WINDOW_MS)):
        s = g.slices[k]
        n = s.stop - s.start
        got = decide_groups(g.offsets[k], trace.quota[k], ts[s], vals[s], np.full(n, MODE_CHECK, dtype=np.int8),
                            np.zeros(n, dtype=np.int64), k == FETCH, SAMPLES, WINDOW_MS, cap,
                            KernelState.empty(ids, SAMPLES))
        out[g.order[s]] = got
    return out


# -- (c) kafka-python's kafka.metrics ----------------------------------------------------------------------------------
def run_kafka_python(trace: Trace, n: int) -> list[int]:
    from kafka.errors import QuotaViolationError
    from kafka.metrics import MetricConfig, Metrics, Quota
    from kafka.metrics.stats import Rate as KRate

    metrics = Metrics()
    ids = trace.quota.shape[1]
    sensors: dict[tuple[int, int], tuple[object, object, object, MetricConfig]] = {}
    caps = (None, None, WINDOW_MS)
    groups = ("Produce", "Fetch", "Request")

    def sensor(k: int, u: int) -> tuple[object, object, object, MetricConfig]:
        s = sensors.get((k, u))
        if s is None:
            config = MetricConfig(quota=Quota.upper_bound(float(trace.quota[k, u])), samples=SAMPLES,
                                  time_window_ms=WINDOW_MS)
            sen = metrics.sensor(f"{groups[k]}-user-{u}:", config=config)  # kafka-python records with this
            rate = KRate()
            name = metrics.metric_name("byte-rate", groups[k], tags={"user": f"user-{u}", "client-id": ""})
            sen.add(name, rate, config)
            s = sensors[(k, u)] = (sen, rate, metrics.metrics[name], config)
        return s

    out = []
    del ids
    for k, u, t, v in zip(trace.kind[:n].tolist(), trace.user[:n].tolist(), trace.ts[:n].tolist(),
                          trace.value[:n].tolist(), strict=True):
        sen, rate, metric, config = sensor(k, u)
        try:
            sen.record(v, t)  # type: ignore[attr-defined]
            ms_ = 0
        except QuotaViolationError:
            value = metric.value(t)  # type: ignore[attr-defined]
            window = int(rate.window_size(config, t))  # type: ignore[attr-defined]
            bound = config.quota.bound
            cap = caps[k]
            ms_ = to_int32(throttle_time(value, bound, window) if cap is None
                           else bounded_throttle_time(value, bound, window, cap))
            if k == FETCH:
                rate.record(config, -v, t)  # type: ignore[attr-defined]  # un-record without a check
        out.append(ms_)
    return out


# -- harness -----------------------------------------------------------------------------------------------------------
def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float, object]:
    """Best of ``repeat`` runs: (process CPU seconds, wall seconds, result). CPU time is the headline: the two
    cores are shared with other jobs, which inflates wall time far more than CPU time."""
    best_cpu, best_wall, result = math.inf, math.inf, None
    for _ in range(repeat):
        gc.collect()
        c, w = time.process_time(), time.perf_counter()
        result = fn()
        best_cpu = min(best_cpu, time.process_time() - c)
        best_wall = min(best_wall, time.perf_counter() - w)
    return best_cpu, best_wall, result


def memory_per_id(build: Callable[[], object], count: Callable[[object], int]) -> float:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    obj = build()
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))
    return size / max(1, count(obj))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--ids", type=int, default=10_000)
    ap.add_argument("--kp-events", type=int, default=None, help="decisions replayed through kafka-python (all)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mem-events", type=int, default=200_000, help="decisions replayed for the memory pass")
    args = ap.parse_args()

    trace = make_trace(args.events, args.ids)
    n = len(trace)
    print(f"trace: {n:,} decisions over {args.ids:,} users x 3 quota types, "
          f"{(trace.ts[-1] - trace.ts[0]) / 1000:.0f} s of traffic")

    # warm-up: numba compilation (cached on disk after the first run) is not part of the decision cost
    small = make_trace(2000, 50, seed=1)
    run_kernel(small, group(small))

    c_group, w_group, grouped = timed(lambda: group(trace), args.repeat)
    assert isinstance(grouped, Grouped)
    c_kernel, w_kernel, kernel_out = timed(lambda: run_kernel(trace, grouped), args.repeat)
    c_setup, w_setup, _ = timed(lambda: managers_for(trace), 1)
    c_mgr, w_mgr, mgr_out = timed(lambda: run_managers(trace, managers_for(trace), n), 1)
    c_mgr, w_mgr = c_mgr - c_setup, w_mgr - w_setup
    c_rate, w_rate, rate_out = timed(lambda: run_rates(trace, n), 1)
    kp_n = n if args.kp_events is None else min(args.kp_events, n)
    c_kp, w_kp, kp_out = timed(lambda: run_kafka_python(trace, kp_n), 1)

    assert isinstance(kernel_out, np.ndarray) and isinstance(mgr_out, list) and isinstance(rate_out, list)
    identical = kernel_out.tolist() == mgr_out == rate_out
    throttled = float(np.mean(kernel_out > 0))
    assert isinstance(kp_out, list)
    kp_throttled = float(np.mean(np.array(kp_out) > 0))
    ours_on_kp = float(np.mean(kernel_out[:kp_n] > 0))

    cpu = {
        "manager": c_mgr / n * 1e9,
        "rate": c_rate / n * 1e9,
        "kernel": c_kernel / n * 1e9,
        "kernel+group": (c_kernel + c_group) / n * 1e9,
        "kafka-python": c_kp / kp_n * 1e9,
    }
    wall = {
        "manager": w_mgr / n * 1e9,
        "rate": w_rate / n * 1e9,
        "kernel": w_kernel / n * 1e9,
        "kernel+group": (w_kernel + w_group) / n * 1e9,
        "kafka-python": w_kp / kp_n * 1e9,
    }

    def build_mgr() -> list[ClientQuotaManager]:
        ms = managers_for(trace)
        run_managers(trace, ms, min(args.mem_events, n))
        return ms

    mem_mgr = memory_per_id(build_mgr, lambda ms: sum(m.sensor_count for m in ms))  # type: ignore[attr-defined]
    state = KernelState.empty(args.ids, SAMPLES)
    kernel_bytes = (state.value.nbytes + state.start.nbytes + state.last.nbytes + state.n.nbytes
                    + state.current.nbytes) / args.ids

    print(f"per-decision results identical (manager == Rate == kernel): {identical}; "
          f"throttled share {throttled:.1%}; on the first {kp_n:,}: {ours_on_kp:.1%}, "
          f"kafka-python (pre-3.8 windowing) {kp_throttled:.1%}")
    print()
    print("| path | decisions | CPU ns / decision | wall ns / decision | kafka-python CPU ÷ this CPU |")
    print("|---|---:|---:|---:|---:|")
    rows = [
        ("(a) ClientQuotaManager.record_and_get_throttle_ms, per request", "manager", n),
        ("(a') Rate.record_and_throttle per request (quota-id known)", "rate", n),
        ("(b) kernel decide_groups (numba), pre-grouped arrays", "kernel", n),
        ("(b) kernel incl. grouping (lexsort + offsets)", "kernel+group", n),
        ("(c) kafka-python kafka.metrics Sensor+Rate+Quota", "kafka-python", kp_n),
    ]
    for label, key, count in rows:
        print(f"| {label} | {count:,} | {cpu[key]:,.0f} | {wall[key]:,.0f} | "
              f"{cpu['kafka-python'] / cpu[key]:.1f}x |")
    print()
    print(f"memory per active quota-id: ClientQuotaManager {mem_mgr:,.0f} B (tracemalloc, incl. override map, "
          f"tag caches; {min(args.mem_events, n):,} decisions); kernel state {kernel_bytes:,.0f} B")
    print(f"CPU s: kernel {c_kernel:.3f} + grouping {c_group:.3f}; manager {c_mgr:.2f}; Rate {c_rate:.2f}; "
          f"kafka-python {c_kp:.2f} for {kp_n:,}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")

if __name__ == "__main__":
    main()
