"""What one forwarded Produce makes the connection core touch with cold caches, counted by a cache simulator: this
tree against ``--gateway-src`` trees, deterministic (the same figures on a loaded machine).

    PYTHONPATH=$PWD/src .venv/bin/python bench/gateway_footprint.py [--gateway-src DIR ...] [--requests 30] \
        [--top 25] [--out FILE]

Needs valgrind (``make bench-setup`` installs it). Why: bench/gateway_cold.py found that a request's cost in
the running gateway follows the memory it touches, code and data, more than the instructions it executes (each
request finds the gateway's code evicted by the client's and the broker's), and its timings move by ±15 %
between processes. Here valgrind's callgrind simulates the caches (32 KiB L1s, an 8 MiB last level) while the
harness of bench/gateway_cold.py runs: a ``ClientConnection`` fed a 1 KB Produce and its response through the
protocol callbacks (event log on, a producer quota in force, transports that only count bytes), 300 requests to
warm up, then ``--requests`` requests each after 8 MiB of memory was written. Events are collected only inside the
two ``buffer_updated`` callbacks (the core and everything it calls). A second run makes the same warm-up and the
same flushes with no measured request; the difference, divided by ``--requests``, is one cold request:

* ``Ir``: instructions executed;
* ``LL i`` / ``LL d``: last-level misses for instructions and for data, the lines that come from memory (64 bytes
  each): what a cold request costs, ~0.1 µs each on this machine;
* per function (the core's, CPython's, libc's), the same, its largest first.

It does not see uvloop nor the kernel (the transports are C builtins that drop the bytes), so a change that saves a
write system call or uvloop's work shows in bench/gateway_cpu.py only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

FLUSH_BYTES = 8 * 1024 * 1024  # the simulated last level's size: every line of it is written between requests
EVENTS = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")
_PREFIXES = ("__pyx_f_9quotaflow_7gateway_4data_10connection_14", "__pyx_pw_9quotaflow_", "__pyx_f_9quotaflow_")


def child(requests: int, flushes: int) -> None:
    """The harness (inside valgrind): warm up, then ``flushes`` flushes, the first ``requests`` each followed by a
    request."""
    import numpy as np
    from gateway_cold import _CTransport
    from gateway_core import _core_connection, feed, produce_frames, quota_store

    from quotaflow.gateway.server import Gateway

    memory = np.ones(FLUSH_BYTES // 8)
    connection_cls, upstream_cls = _core_connection()
    request, response = produce_frames()

    async def run() -> None:
        with tempfile.TemporaryDirectory(prefix="quotaflow-footprint-") as work:
            gw = Gateway(("127.0.0.1", 9), {"PLAINTEXT": ("127.0.0.1", 0)}, quota_store(Path(work) / "q.db"),
                         event_log=Path(work) / "events")
            gw.broker_quotas.load(gw.store.snapshot())
            conn = connection_cls(gw, "PLAINTEXT", "127.0.0.1", 1)
            conn.connection_made(_CTransport())
            conn._upstream = side = upstream_cls(conn, _CTransport())
            for _ in range(300):
                feed(conn, request)
                feed(side, response)
            for i in range(flushes):
                memory[::8] += 1.0  # one write per 64-byte line
                if i < requests:
                    feed(conn, request)
                    feed(side, response)
            assert not conn._closing
            gw.store.close()

    asyncio.run(run())
    os._exit(0)  # the event log's writer is not waited for: nothing it does is measured


def _callgrind(src: str | None, requests: int, flushes: int, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": src} if src else dict(os.environ)
    subprocess.run(["valgrind", "--tool=callgrind", "--cache-sim=yes", f"--LL={FLUSH_BYTES},16,64",
                    "--collect-atstart=no", "--toggle-collect=*buffer_updated*", f"--callgrind-out-file={out}",
                    sys.executable, __file__, "--child", str(requests), str(flushes)],
                   env=env, check=True, capture_output=True)


def _per_function(path: Path) -> dict[str, list[int]]:
    """Exclusive events per function name (callgrind_annotate's table; inlined headers folded into their function)."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no", str(path)],
                          check=True, capture_output=True, text=True).stdout
    table: dict[str, list[int]] = defaultdict(lambda: [0] * len(EVENTS))
    for line in text.splitlines():
        m = re.match(r"^\s*([\d,]+ .*?)\s(\S+:\S+)(?: \[.*\])?$", line)
        if not m:
            continue
        values = [0 if v == "." else int(v.replace(",", ""))
                  for v in re.findall(r"([\d,]+|\.)(?:\s*\(\s*[\d.]+%\))?", m.group(1))]
        if len(values) < len(EVENTS):
            continue
        name = m.group(2).rsplit(":", 1)[-1]
        for prefix in _PREFIXES:
            name = name.removeprefix(prefix)
        table[name] = [a + b for a, b in zip(table[name], values[:len(EVENTS)], strict=True)]
    return table


def measure(src: str | None, requests: int) -> dict[str, list[float]]:
    """Per cold request, per function: events of the run with requests minus the run without (same flushes)."""
    with tempfile.TemporaryDirectory(prefix="quotaflow-footprint-") as work:
        runs = [Path(work) / "with.out", Path(work) / "without.out"]
        procs = []
        for n, out in zip((requests, 0), runs, strict=True):  # the two runs side by side: one per core
            procs.append(subprocess.Popen([sys.executable, __file__, "--callgrind", src or "", str(n),
                                           str(requests), str(out)]))
        for p in procs:
            if p.wait() != 0:
                raise SystemExit(f"callgrind run failed ({p.args})")
        with_, without = (_per_function(p) for p in runs)
    return {name: [(a - b) / requests for a, b in zip(with_.get(name, [0] * len(EVENTS)),
                                                       without.get(name, [0] * len(EVENTS)), strict=True)]
            for name in set(with_) | set(without)}


def _total(table: dict[str, list[float]]) -> list[float]:
    return [sum(v[i] for v in table.values()) for i in range(len(EVENTS))]


def _ll(values: list[float]) -> tuple[float, float]:
    return values[6], values[7] + values[8]


def report(results: dict[str, dict[str, list[float]]], top: int) -> list[str]:
    names = list(results)
    lines = ["# bench/gateway_footprint.py: one cold forwarded Produce through the connection core", "",
             "| tree | instructions | LL misses, code | LL misses, data | LL misses | of the first tree |",
             "|---|---:|---:|---:|---:|---:|"]
    base = sum(_ll(_total(results[names[0]])))
    for name in names:
        total = _total(results[name])
        code, data = _ll(total)
        lines.append(f"| {name} | {total[0]:,.0f} | {code:,.0f} | {data:,.0f} | {code + data:,.0f} | "
                     f"{(code + data) / base:.2f}x |")
    for name in names:
        table = results[name]
        lines += ["", f"## {name}: functions by last-level misses (per request)", "",
                  "| function | instructions | LL code | LL data |", "|---|---:|---:|---:|"]
        ranked = sorted(table.items(), key=lambda kv: -sum(_ll(kv[1])))[:top]
        lines += [f"| `{fn[:80]}` | {v[0]:,.0f} | {_ll(v)[0]:.0f} | {_ll(v)[1]:.0f} |" for fn, v in ranked]
    return lines


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), int(sys.argv[3]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--callgrind":
        _callgrind(sys.argv[2] or None, int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gateway-src", action="append", default=[], help="another tree (repeatable)")
    ap.add_argument("--requests", type=int, default=30, help="measured cold requests per run")
    ap.add_argument("--top", type=int, default=25, help="functions listed per tree")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown report here too")
    args = ap.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        ap.error("needs valgrind (Debian: apt-get install valgrind)")
    results = {"this tree": measure(None, args.requests)}
    for src in args.gateway_src:
        results[f"{src}"] = measure(src, args.requests)
    text = "\n".join([*report(results, args.top), "",
                      f"`{' '.join(['bench/gateway_footprint.py', *sys.argv[1:]])}`", ""])
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
