"""The connection core's cost per request with cold CPU caches, this tree against ``--gateway-src`` trees and the
Python floor's protocols, with optional ablations to attribute it (issue 23).

    PYTHONPATH=$PWD/src .venv/bin/python bench/gateway_cold.py [--gateway-src DIR ...] [--flush-mb 64] \
        [--requests 400] [--processes 6] [--ablate engine,authorization,eventlog] [--attribute]

Why: in the running gateway (bench/gateway_cpu.py) a request costs several times what the same code costs in a
tight loop (bench/gateway_core.py: ~15 µs warm against ~90 µs of user time over the Python floor). On two cores
shared with the client and the broker, each request finds the gateway's code and data evicted from the caches
by the others. This bench reproduces that regime in one process: a ``ClientConnection`` fed a 1 KB Produce and
its response through the protocol callbacks (transports that only count bytes, event log on, a producer quota in
force), with ``--flush-mb`` of memory written between requests (64 MB: more than this machine's 32 MB L3, so
every request starts cold). What it measures is proportional to the memory a request touches (code and data),
not to the instructions it executes: a typed compiled Rate changed nothing here, the thread CPU clock's system
calls did, and so did every Python frame taken off a request's path (session 8: a 24-field ``Pending`` made by its
bytecode ``__init__`` cost 9-13 µs cold, made in C by the extension type 6-7).

Each tree runs in ``--processes`` fresh interpreters, alternated (one process's heap layout differs from the
next: ±15 % here); figures are medians. ``--ablate`` replaces parts with no-ops in this tree's runs (engine: the
produce decision and network time; authorization: the Produce request/response hooks' authorization wrapper;
eventlog: the request row), which attributes the cost without editing the source. ``floor`` is bench/
l4_forwarder.py's two protocols fed the same frames.

``--attribute`` measures this tree alone: the whole, each part ablated and all of them ablated take turns request
by request inside each process, so each part's cost is a difference within one heap layout (a few µs apart between
processes, not ±15 %). What it showed (BENCHMARKS.md, its section): a request's cold cost follows the number of
distinct Python functions and objects it touches, ~3 µs for each function call that finds its code cold.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _flusher(mb: int) -> Any:
    memory = np.ones(mb * 1024 * 1024 // 8)

    def flush() -> None:
        memory[::8] += 1.0  # one write per 64-byte cache line

    return flush


class _CTransport:
    """A transport whose methods are C builtins, as uvloop's are (a Python-level fake would add cold calls of its
    own, six ``get_write_buffer_size`` a request among them): writes are taken and dropped, the write buffer is
    always empty."""

    write = writelines = len  # called with one argument: the bytes, or the (size, frame) pair
    get_write_buffer_size = pause_reading = resume_reading = close = int  # no argument: 0
    set_write_buffer_limits = dict  # high=...


PARTS = ("engine", "authorization", "eventlog")


class _Ablation:
    """Parts of this tree replaced with no-ops, and put back (``set`` switches between variants in one process):
    engine: the produce decision, the network time and the one-produce-at-a-time answer; authorization: the Produce
    handler without its authorization wrapper; eventlog: the request row."""

    def __init__(self, gw: Any, enforcement: Any, client_id: str) -> None:
        from quotaflow.gateway.data import api_handlers

        self.gw, self.log = gw, gw._event_log
        self.handlers: Any = api_handlers.HANDLERS
        self.produce_handler = self.handlers[0]
        self.unauthorized = api_handlers.ApiHandler(request=api_handlers._produce_request,
                                                    decide=api_handlers._decide_produce)
        self.enforcement = enforcement  # the connection's: its produce decision is bound per instance
        self.engine = {n: getattr(enforcement, n) for n in ("produce", "network_time")}
        # the one-produce-at-a-time answer, remembered by the connection's Enforcement as the gateway does
        self.limits, self.key = enforcement.produce_limited, ("ANONYMOUS", client_id)
        self.limited = self.limits[self.key]

    def set(self, parts: set[str]) -> None:
        from quotaflow.engine import NOT_THROTTLED

        stubs = {"produce": lambda *a: NOT_THROTTLED, "network_time": lambda *a: None}
        for name, real in self.engine.items():
            setattr(self.enforcement, name, stubs[name] if "engine" in parts else real)
        self.limits[self.key] = False if "engine" in parts else self.limited
        self.handlers[0] = self.unauthorized if "authorization" in parts else self.produce_handler
        self.gw._event_log = None if "eventlog" in parts else self.log


def core_cold(requests: int, mb: int, variants: list[set[str]]) -> list[float]:
    """Median µs per forwarded Produce through this tree's core, caches flushed before each, for each variant (a
    set of ablated parts), the variants taking turns request by request in this one process (same heap)."""
    from gateway_core import CLIENT_ID, _core_connection, feed, produce_frames, quota_store

    from quotaflow.gateway.server import Gateway

    connection_cls, upstream_cls = _core_connection()
    request, response = produce_frames()
    flush = _flusher(mb)

    async def run() -> list[float]:
        with tempfile.TemporaryDirectory(prefix="quotaflow-cold-") as work:
            gw = Gateway(("127.0.0.1", 9), {"PLAINTEXT": ("127.0.0.1", 0)}, quota_store(Path(work) / "q.db"),
                         event_log=Path(work) / "events")
            gw.broker_quotas.load(gw.store.snapshot())
            conn = connection_cls(gw, "PLAINTEXT", "127.0.0.1", 1)
            ablation = _Ablation(gw, conn.enforcement, CLIENT_ID)
            conn.connection_made(_CTransport())
            conn._upstream = side = upstream_cls(conn, _CTransport())

            for parts in variants:
                ablation.set(parts)
                for _ in range(300 // len(variants) + 1):
                    feed(conn, request)
                    feed(side, response)
            spent: list[list[int]] = [[] for _ in variants]
            for i in range(requests * len(variants)):
                ablation.set(variants[i % len(variants)])
                flush()
                start = time.perf_counter_ns()
                feed(conn, request)
                feed(side, response)
                spent[i % len(variants)].append(time.perf_counter_ns() - start)
            ablation.set(set())
            assert not conn._closing
            gw.store.close()
            return [statistics.median(v) / 1000 for v in spent]

    return asyncio.run(run())


def floor_cold(requests: int, mb: int) -> float:
    """The same for bench/l4_forwarder.py's protocols: frames cut by length and written on."""
    import l4_forwarder
    from gateway_core import produce_frames

    request, response = produce_frames()
    flush = _flusher(mb)
    client_side, upstream_side = _CTransport(), _CTransport()
    client = l4_forwarder._Client("127.0.0.1", 9)
    client.transport, client.upstream = client_side, upstream_side  # type: ignore[assignment]
    upstream = l4_forwarder._Upstream(client_side)  # type: ignore[arg-type]
    for _ in range(300):
        client.data_received(request)
        upstream.data_received(response)
    spent = []
    for _ in range(requests):
        flush()
        start = time.perf_counter_ns()
        client.data_received(request)
        upstream.data_received(response)
        spent.append(time.perf_counter_ns() - start)
    return statistics.median(spent) / 1000


def one_process(name: str, src: str | None, args: argparse.Namespace, variants: str = "") -> list[float]:
    env = {**os.environ, "PYTHONPATH": src} if src else dict(os.environ)
    cmd = [sys.executable, __file__, "--child", name, "--requests", str(args.requests), "--flush-mb",
           str(args.flush_mb), "--variants", variants]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout.split()
    return [float(v) for v in out]


def _variants(spec: str) -> list[set[str]]:
    """``"engine+eventlog;"`` -> [{"engine", "eventlog"}, set()]: one variant per ``;``-separated item."""
    return [{p for p in item.split("+") if p} for item in spec.split(";")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gateway-src", action="append", default=[], help="another tree (repeatable)")
    ap.add_argument("--flush-mb", type=int, default=64)
    ap.add_argument("--requests", type=int, default=400, help="measured requests per process (and variant)")
    ap.add_argument("--processes", type=int, default=6, help="fresh interpreters per path, alternated")
    ap.add_argument("--ablate", default="", help="comma-separated: " + ", ".join(PARTS))
    ap.add_argument("--attribute", action="store_true",
                    help="this tree only: each part's cost, its ablation taking turns with the whole in each process")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--variants", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    parts = {p for p in args.ablate.split(",") if p}
    if parts - set(PARTS):
        ap.error(f"--ablate takes {', '.join(PARTS)}")
    if args.child == "floor":
        print(floor_cold(args.requests, args.flush_mb))
        return
    if args.child is not None:
        print(*core_cold(args.requests, args.flush_mb, _variants(args.variants)))
        return
    if args.attribute:
        attribute(args)
        return
    paths: list[tuple[str, str | None]] = [("gateway", None)]
    paths += [(f"gateway@{src}", src) for src in args.gateway_src]
    paths.append(("floor", None))
    runs: dict[str, list[float]] = {name: [] for name, _ in paths}
    for i in range(args.processes):
        for name, src in paths if i % 2 == 0 else paths[::-1]:
            variants = "+".join(sorted(parts)) if name == "gateway" else ""
            runs[name].append(one_process(name, src, args, variants)[0])
    print(f"cold per request (caches flushed with {args.flush_mb} MB before each; medians of {args.processes} "
          f"processes x {args.requests} requests{'; ablated: ' + args.ablate if parts else ''}):")
    base = statistics.median(runs["gateway"])
    for name, values in runs.items():
        med = statistics.median(values)
        print(f"  {name:40} {med:7.1f} µs  ({med / base:.2f}x this tree)  runs: "
              + " ".join(f"{v:.0f}" for v in sorted(values)))


def attribute(args: argparse.Namespace) -> None:
    """Each part's cost: the whole, each part ablated and all ablated take turns request by request in each process
    (one heap layout for all, so their differences are not the ±15 % between processes); medians over processes
    of each process's difference to the whole."""
    names = ["whole", *PARTS, "all"]
    spec = ";".join(["", *PARTS, "+".join(PARTS)])
    rows = [one_process("gateway", None, args, spec) for _ in range(args.processes)]
    print(f"cold per request by part (caches flushed with {args.flush_mb} MB before each; {args.processes} "
          f"processes x {args.requests} requests per variant, variants taking turns):")
    for i, name in enumerate(names):
        med = statistics.median(r[i] for r in rows)
        diffs = [r[i] - r[0] for r in rows]
        what = "" if not i else f"  part's cost {-statistics.median(diffs):5.1f} µs  (per process: " + \
            " ".join(f"{-d:.0f}" for d in sorted(diffs, reverse=True)) + ")"
        print(f"  {name + (' ablated' if i else ''):24} {med:7.1f} µs{what}")


if __name__ == "__main__":
    main()
