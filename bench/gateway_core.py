"""The gateway's connection core (issue 23): CPU per request against the broker behind it and a minimal Python
forwarder, this tree and ``--gateway-src`` (before), in one run.

    PYTHONPATH=$PWD/src .venv/bin/python bench/gateway_core.py [--gateway-src DIR] [--requests 3000] \
        [--rounds 3] [--out FILE]

``--core-only`` prints this tree's core figures (µs, opcodes) and exits (how the before tree is measured).
``--gateway-src`` runs the second gateway from another source tree (``git archive main src | tar -x -C /tmp/main``,
then ``--gateway-src /tmp/main/src``). Figures:

* core: the connection core's own work per forwarded Produce, with no I/O: a ``ClientConnection`` of each tree fed
  its request and its upstream response through the protocol callbacks, with transports that only count bytes
  (frame cut, header and acks read, hooks, quota decision, render, write, timers): µs of thread CPU, and the
  Python opcodes it executes (a deterministic count, the same on a loaded machine: in the running gateway each
  request starts with cold caches, so its cost follows the code it runs);
* processes, each CPU read from ``/proc/<pid>/task/*/schedstat`` (user + system, all threads) around every segment:
  tansu direct; ``quotaflow gateway`` of this tree and of ``--gateway-src``, event log off (issue 23's event-log
  cost is another lane's), with a producer quota in force for the client id (metered on every request, never
  throttling); and the floor, an ``asyncio.Protocol`` on uvloop that cuts frames by their length and forwards them.
  Loads over raw sockets, 1 KB single-record Produce v9 requests with acks=1: one at a time (each awaited) and
  pipelined (the same, 16 in flight; a byte-rate-limited producer is read one produce at a time by the gateway, as
  Kafka does, so the pipelined gateway rows are the core's cost with that rule). Rounds alternate the order; medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from kafka.protocol.producer import ProduceResponse

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway_tls import flat_out, plain
from gateway_wire_latency import produce_frame

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import QuotaEntity
from quotaflow.store import open_store
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.processes import stop_process
from quotaflow.testing.tansu import Tansu

CLIENT_ID = "bench-core"
TOPIC = "core"
WINDOW = 16  # pipelined requests in flight

FORWARDER = r'''
import asyncio, sys, uvloop
class Up(asyncio.Protocol):
    def __init__(self, client): self.client = client
    def data_received(self, data): self.client.write(data)
    def connection_lost(self, exc): self.client.close()
class Client(asyncio.Protocol):
    def __init__(self): self.buf, self.up, self.waiting = bytearray(), None, bytearray()
    def connection_made(self, t):
        self.t = t
        asyncio.ensure_future(self.connect())
    async def connect(self):
        up, _ = await asyncio.get_running_loop().create_connection(lambda: Up(self.t), "127.0.0.1", int(sys.argv[1]))
        self.up = up
        self.data_received(b"")
    def data_received(self, data):
        self.buf += data
        if self.up is None: return
        buf, n = self.buf, 0
        while len(buf) - n >= 4:
            size = int.from_bytes(buf[n:n + 4], "big", signed=True)
            if len(buf) - n < 4 + size: break
            self.up.write(bytes(buf[n:n + 4 + size]))  # whole frames, as a frame-aware proxy does
            n += 4 + size
        del buf[:n]
    def connection_lost(self, exc):
        if self.up is not None: self.up.close()
async def main():
    server = await asyncio.get_running_loop().create_server(Client, "127.0.0.1", 0)
    print("ready", server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
uvloop.run(main())
'''


def produce_frames() -> tuple[bytes, bytes]:
    """(a framed 1 KB Produce v9 request, the framed response a broker gives it)."""
    r = ProduceResponse[9]
    partition = r.TopicProduceResponse.PartitionProduceResponse(index=0, error_code=0, base_offset=1,
                                                                 log_append_time_ms=-1, log_start_offset=0,
                                                                 record_errors=[], error_message=None)
    response = r(responses=[r.TopicProduceResponse(name=TOPIC, partition_responses=[partition])],
                 throttle_time_ms=0)
    response.with_header(correlation_id=1)  # produce_frame's
    return produce_frame(TOPIC, CLIENT_ID), bytes(response.encode(header=True, framed=True))


def quota_store(path: Path) -> Path:
    admin = Admin(open_store(path))
    try:
        assert admin.alter([Alteration.of(QuotaEntity(client_id=CLIENT_ID), {"producer_byte_rate": 1e9})])[0].ok
    finally:
        admin.close()
    return path


# -- the core alone ---------------------------------------------------------------------------------------------

class _CountingTransport:
    """Takes writes and counts their bytes: the core's work without the socket's."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.written += len(chunk)

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None: ...
    def close(self) -> None: ...

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, _name: str, default: Any = None) -> Any:
        return default


def _core_connection() -> tuple[Any, Any]:
    """ClientConnection and UpstreamProtocol of the tree on sys.path (before and after the gateway's planes split)."""
    try:
        from quotaflow.gateway.data.connection import ClientConnection, UpstreamProtocol
    except ImportError:  # a tree from before gateway/data/
        from quotaflow.gateway.connection import ClientConnection, UpstreamProtocol  # type: ignore[no-redef]
    return ClientConnection, UpstreamProtocol


def feed(proto: asyncio.BufferedProtocol, data: bytes) -> None:
    """Hand ``data`` to a buffered protocol as its event loop would after reads (several when its buffer, which
    starts small and grows on demand, has less room than ``data``)."""
    view = memoryview(data)
    while view:
        buf = proto.get_buffer(-1)
        n = min(len(buf), len(view))
        buf[:n] = view[:n]  # type: ignore[index]
        proto.buffer_updated(n)
        view = view[n:]


def core_figures(store: Path, n: int, *, opcodes: bool = False) -> float:
    """µs of this thread's CPU per forwarded Produce through a ClientConnection, no I/O; with ``opcodes``, the
    Python opcodes it executes per request instead (counted with a tracer over 200 requests: deterministic, the
    same on a loaded machine; compiled code executes none)."""
    from quotaflow.gateway.server import Gateway

    connection_cls, upstream_cls = _core_connection()
    request, response = produce_frames()

    async def run() -> float:
        gw = Gateway(("127.0.0.1", 9), {"PLAINTEXT": ("127.0.0.1", 0)}, store)
        gw.broker_quotas.load(gw.store.snapshot())
        conn = connection_cls(gw, "PLAINTEXT", "127.0.0.1", 1)
        client, upstream = _CountingTransport(), _CountingTransport()
        conn.connection_made(client)
        conn._upstream = upstream_cls(conn, upstream)
        side = conn._upstream

        for _ in range(500):
            feed(conn, request)
            feed(side, response)
        if opcodes:
            counted = [0]

            def tracer(frame: Any, event: str, _arg: Any) -> Any:
                frame.f_trace_opcodes = True
                if event == "opcode":
                    counted[0] += 1
                return tracer

            sys.settrace(tracer)
            for _ in range(200):
                feed(conn, request)
                feed(side, response)
            sys.settrace(None)
            result = counted[0] / 200
        else:
            start = time.thread_time_ns()
            for _ in range(n):
                feed(conn, request)
                feed(side, response)
            result = (time.thread_time_ns() - start) / n / 1000
        assert not conn._closing and client.written % len(response) == 0
        gw.store.close()
        return result

    return asyncio.run(run())


def core(store_dir: Path, n: int, src: str | None) -> tuple[float, float]:
    """(median µs over three runs, opcodes) per forwarded Produce of this tree, or of ``src`` in a subprocess."""
    if src is not None:
        out = subprocess.run([sys.executable, __file__, "--core-only", "--requests", str(n)], check=True,
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": src}).stdout
        us, ops = out.split()[-2:]
        return float(us), float(ops)
    us = statistics.median(core_figures(quota_store(store_dir / f"core-{i}.db"), n) for i in range(3))
    return us, core_figures(quota_store(store_dir / "core-ops.db"), n, opcodes=True)


# -- processes ------------------------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def load(port: int, request: bytes, n: int, window: int) -> float:
    """Send ``n`` requests with ``window`` in flight on one connection (after a warm-up); seconds taken."""
    connect = plain(("127.0.0.1", port))
    flat_out(connect, request, 50, 1)  # topic created, upstream connected
    return n / flat_out(connect, request, n, window)


@contextmanager
def forwarder(broker_port: int, work: Path) -> Iterator[tuple[int, int]]:
    proc = subprocess.Popen([sys.executable, "-c", FORWARDER, str(broker_port)], stdout=subprocess.PIPE,
                            stderr=open(work / "forwarder.log", "wb"))  # noqa: SIM115
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().split()[1])
        yield port, proc.pid
    finally:
        stop_process(proc, 10)


def gateway(tansu: Tansu, work: Path, name: str, src: str | None) -> GatewayProcess:
    gw_dir = work / name
    gw_dir.mkdir()
    before = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = src
    try:
        return GatewayProcess(tansu.bootstrap, quota_store(gw_dir / "quotas.db"), gw_dir).start()
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gateway-src", default=None)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--core-only", action="store_true", help="print this tree's core µs and opcodes, then exit")
    args = ap.parse_args()
    if args.core_only:
        with tempfile.TemporaryDirectory(prefix="quotaflow-core-") as work:
            print(*core(Path(work), args.requests * 3, None))
        return
    request, _ = produce_frames()
    load_before, started = os.getloadavg(), time.time()
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="quotaflow-core-")))
        cores = {"gateway": core(work, args.requests * 3, None)}
        if args.gateway_src:
            cores["gateway@before"] = core(work, args.requests * 3, args.gateway_src)
        broker = stack.enter_context(Tansu())
        assert broker.pid is not None
        paths: list[tuple[str, int, int | None]] = [("broker", int(broker.bootstrap.rsplit(":", 1)[1]), None)]
        for name, src in [("gateway", None)] + ([("gateway@before", args.gateway_src)] if args.gateway_src else []):
            gw = gateway(broker, work, name.replace("@", "-"), src)
            stack.callback(gw.stop, 30)
            assert gw.pid is not None
            paths.append((name, gw.port, gw.pid))
        fw_port, fw_pid = stack.enter_context(forwarder(paths[0][1], work))
        paths.append(("forwarder", fw_port, fw_pid))
        results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
        for r in range(args.rounds):
            for mode, window in (("one at a time", 1), ("pipelined", WINDOW)):
                for name, port, pid in paths if r % 2 == 0 else paths[::-1]:
                    pids = [p for p in (pid, broker.pid) if p is not None]
                    before = {p: cpu_seconds(p) for p in pids}
                    seconds = load(port, request, args.requests, window)
                    spent = {p: cpu_seconds(p) - before[p] for p in pids}
                    proxy = spent[pid] / args.requests * 1e6 if pid is not None else float("nan")
                    brok = spent[broker.pid] / args.requests * 1e6
                    results.setdefault((mode, name), []).append((proxy, brok, args.requests / seconds))
                    print(f"round {r + 1} {mode:13} {name:15} proxy {proxy:7.1f} µs broker {brok:7.1f} µs "
                          f"{args.requests / seconds:8.0f}/s", flush=True)
    report = render(args, cores, results, load_before, time.time() - started)
    print(report)
    if args.out is not None:
        args.out.write_text(report)


def _core_ratio(cores: dict[str, tuple[float, float]]) -> str:
    if "gateway@before" not in cores:
        return ""
    (us, ops), (us0, ops0) = cores["gateway"], cores["gateway@before"]
    return f" (this tree / before: {us / us0:.2f}x time, {ops / ops0:.2f}x opcodes)"


def render(args: argparse.Namespace, cores: dict[str, tuple[float, float]],
           results: dict[tuple[str, str], list[tuple[float, float, float]]],
           load_before: tuple[float, float, float], seconds: float) -> str:
    med = statistics.median
    command = f"PYTHONPATH=$PWD/src .venv/bin/python bench/gateway_core.py --requests {args.requests} " \
              f"--rounds {args.rounds}" + (f" --gateway-src {args.gateway_src}" if args.gateway_src else "")
    lines = [f"`{command}`", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} CPUs shared with other jobs; load average "
             f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after; {seconds:.0f} s; Python "
             f"{platform.python_version()}. Medians over {args.rounds} rounds of {args.requests} requests.", "",
             "Core alone, no I/O, per forwarded Produce: " + "; ".join(
                 f"{name} **{us:.1f} µs**, {ops:,.0f} Python opcodes" for name, (us, ops) in cores.items())
             + _core_ratio(cores) + ".", "",
             "| load | path | proxy CPU µs / request | broker CPU µs / request | proxy / its broker | requests/s |",
             "|---|---|---:|---:|---:|---:|"]
    for (mode, name), rows in results.items():
        proxy, brok = med(r[0] for r in rows), med(r[1] for r in rows)
        shown = "-" if name == "broker" else f"{proxy:.1f}"
        ratio = "" if name == "broker" else f"{proxy / brok:.2f}x"
        lines.append(f"| {mode} | {name} | {shown} | {brok:.1f} | {ratio} | {med(r[2] for r in rows):,.0f} |")

    def proxy(mode: str, name: str) -> float | None:
        rows = results.get((mode, name))
        return med(r[0] for r in rows) if rows else None

    lines.append("")
    for mode in ("one at a time", "pipelined"):
        new, old, floor = proxy(mode, "gateway"), proxy(mode, "gateway@before"), proxy(mode, "forwarder")
        parts = []
        if new is not None and old is not None:
            parts.append(f"this tree / before **{new / old:.2f}x**")
        if new is not None and floor is not None:
            parts.append(f"this tree / Python floor {new / floor:.2f}x")
        if old is not None and floor is not None:
            parts.append(f"before / Python floor {old / floor:.2f}x")
        lines.append(f"* {mode}: " + "; ".join(parts) + ".")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
