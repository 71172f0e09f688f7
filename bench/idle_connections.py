"""Issue 37 item 2: what an idle client costs, against the gateway and against tansu, and whether a producer still
gets its round trip while they are held.

    .venv/bin/python bench/idle_connections.py [--clients 1000,5000,20000] [--rounds 500] \
        [--out bench/results/idle_connections.md]

For each N, on a fresh tansu (and a fresh ``quotaflow gateway`` process in front of another fresh tansu): a kafka-
python producer's round trips (1 KB, acks=1, ``send().get()`` one at a time: median and p99 of ``--rounds``) with no
other client; then N idle clients connect, each sends one Metadata request (so the gateway opens its upstream leg, as
after a real client's bootstrap), reads the answer and goes quiet; 3 s later (the gateway's housekeeping releases an
idle connection's buffers after 1 s) the process's RSS growth / N is the memory per idle client, and the producer's
round trips are measured again, and once more 2 s after the N closed (a control: on a shared machine the round trip
drifts with others' load, whatever the idle clients do). Clients come from 127.0.0.2-127.0.0.9 so loopback's ephemeral
ports suffice. The bench raises its own open-file limit (children inherit it) so that it, tansu and the gateway can
hold N (the gateway needs 2N + 64: max.connections defaults to what its limit allows); where the hard limit cannot be
raised, N is capped to (hard - 1024) / 2. Bounded: N <= 20,000, batches of 500, every socket closed before the next
step.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from statistics import median, quantiles

from kafka import KafkaProducer
from kafka.protocol.metadata import MetadataRequest

from quotaflow.store import open_store
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu

MAX_CLIENTS = 20_000
BATCH = 500
SOURCES = [f"127.0.0.{i}" for i in range(2, 10)]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _metadata_frame() -> bytes:
    request = MetadataRequest[1](topics=[])
    request.with_header(correlation_id=1, client_id="idle")
    return bytes(request.encode(version=1, header=True, framed=True))


def _read_frame(sock: socket.socket) -> None:
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    got = 0
    while got < size:
        chunk = sock.recv(size - got)
        if not chunk:
            raise ConnectionError("closed")
        got += len(chunk)


def idle_clients(port: int, n: int, first: int = 0) -> list[socket.socket]:
    """``n`` clients that each asked for Metadata once and got it, then went quiet (source addresses from the
    ``first``-th client's on)."""
    frame = _metadata_frame()
    clients: list[socket.socket] = []
    for start in range(first, first + n, BATCH):
        batch = []
        for i in range(start, min(first + n, start + BATCH)):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.settimeout(60)
            sock.bind((SOURCES[i % len(SOURCES)], 0))
            sock.connect(("127.0.0.1", port))
            sock.sendall(frame)
            batch.append(sock)
        for sock in batch:
            _read_frame(sock)
        clients.extend(batch)
    return clients


def descriptors(pid: int) -> int:
    """The open descriptors of process ``pid`` (/proc/<pid>/fd)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def nofile_of(pid: int) -> int:
    """The soft open-file limit of process ``pid`` (/proc/<pid>/limits)."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise RuntimeError("no open-file limit")


class Holders:
    """Idle clients held by ``procs`` child processes (each with its own open-file limit), opened in batches of
    ``BATCH`` on command. With ``paced_pid`` (a gateway whose idle upstream legs close), a batch is sent only while
    that process has room for it with every leg still open (2 descriptors a client), so the ramp waits for the legs
    of the previous batches to be closed instead of running the gateway into EMFILE; bounded by ``deadline_s``."""

    def __init__(self, port: int, procs: int) -> None:
        self.children = [subprocess.Popen([sys.executable, __file__, "--hold", str(port), "--source", str(i)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                         for i in range(procs)]
        self.held = [0] * procs

    def open(self, n: int, paced_pid: int | None = None, deadline_s: float = 600.0) -> None:
        deadline = time.monotonic() + deadline_s
        limit = nofile_of(paced_pid) - 256 if paced_pid is not None else 0
        while sum(self.held) < n:
            batch = min(BATCH, n - sum(self.held))
            while paced_pid is not None and descriptors(paced_pid) + 2 * batch > limit:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the gateway kept {descriptors(paced_pid)} descriptors open")
                time.sleep(0.2)
            i = self.held.index(min(self.held))  # the child holding the fewest
            child = self.children[i]
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(f"{batch}\n")
            child.stdin.flush()
            self.held[i] = int(child.stdout.readline())

    def close(self) -> None:
        for child in self.children:
            assert child.stdin is not None
            child.stdin.close()  # the child closes its sockets and exits
        for child in self.children:
            child.wait(60)


def hold(port: int, source: int) -> None:
    """A holder child: open the number of idle clients each stdin line asks for, answer how many it holds; on EOF
    close them all."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    held: list[socket.socket] = []
    for line in sys.stdin:
        held += idle_clients(port, int(line), first=source * MAX_CLIENTS + len(held))
        print(len(held), flush=True)
    for sock in held:
        sock.close()


def round_trips(bootstrap: str, rounds: int, topic: str) -> tuple[float, float]:
    """(median, p99) ms of a 1 KB acks=1 produce, one at a time."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
    try:
        for _ in range(20):  # warm up: topic created, metadata known
            producer.send(topic, b"w" * 1024).get(timeout=60)
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            producer.send(topic, b"x" * 1024).get(timeout=60)
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        producer.close(5)
    return median(times), quantiles(times, n=100)[98]


def measure(target_pid: int, port: int, bootstrap: str, n: int, rounds: int, *, procs: int = 0,
            paced: bool = False, settle_s: float = 3.0) -> dict[str, float]:
    """One point: the producer's round trips alone, then with ``n`` idle clients held (by this process, or spread
    over ``procs`` holder processes: ``Holders``; ``paced``: the ramp waits for the target's idle upstream legs to
    close), ``settle_s`` after the last connected, then after they closed (the control)."""
    topic = f"idle-{uuid.uuid4().hex[:8]}"
    idle_med, idle_p99 = round_trips(bootstrap, rounds, topic)
    before, fds_before = rss_kb(target_pid), descriptors(target_pid)
    t0 = time.monotonic()
    holders = Holders(port, procs) if procs else None
    clients: list[socket.socket] = []
    try:
        if holders is not None:
            holders.open(n, paced_pid=target_pid if paced else None)
        else:
            clients = idle_clients(port, n)
        connect_s = time.monotonic() - t0
        time.sleep(settle_s)
        after, fds_after = rss_kb(target_pid), descriptors(target_pid)
        held_med, held_p99 = round_trips(bootstrap, rounds, topic)
    finally:
        for sock in clients:
            sock.close()
        if holders is not None:
            holders.close()
    time.sleep(2.0)
    after_med, after_p99 = round_trips(bootstrap, rounds, topic)  # the control: load drift, not the idle clients
    return {"after_med": after_med, "after_p99": after_p99, "n": n, "kb_per_client": (after - before) / n,
            "fds_per_client": (fds_after - fds_before) / n, "fds_after": fds_after,
            "rss_before_mb": before / 1024, "rss_after_mb": after / 1024,
            "connect_s": connect_s, "idle_med": idle_med, "idle_p99": idle_p99, "held_med": held_med,
            "held_p99": held_p99}


def descriptors_for(ns: list[int], per_client: int = 2) -> list[int]:
    """Raise this process's open-file limit (children inherit it) so that it, tansu and a gateway can hold the
    largest N (the gateway needs ``per_client`` N + 64: 2 with every upstream leg open, 1 once idle legs are closed
    and the clients are held by other processes); where the hard limit cannot be raised, each N is capped to what a
    gateway with that limit holds, (hard - 1024) / ``per_client``. Returns the Ns to run, at most ``MAX_CLIENTS``
    each."""
    ns = [min(MAX_CLIENTS, n) for n in ns]
    need = per_client * max(ns) + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, need))  # root only: children inherit it
        except (OSError, ValueError) as e:  # no CAP_SYS_RESOURCE: N as large as the hard limit lets the gateway hold
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            ns = sorted({min(n, (hard - 1024) // per_client) for n in ns})
            print(f"open-file limit {hard} ({e}): N capped to what a gateway with that limit holds: {ns}",
                  file=sys.stderr)
    else:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(need, hard)), hard))
    return ns


def run(ns: list[int], rounds: int, work: Path, *, per_proc: int = 0, upstream_idle_ms: int = 10_000,
        paced: bool = True) -> list[tuple[str, dict[str, float]]]:
    """Each N against tansu, then against a gateway in front of another tansu. ``per_proc`` > 0: the clients are
    held by ceil(N / per_proc) holder processes, and the gateway closes idle upstream legs after
    ``upstream_idle_ms`` (``quotaflow.upstream.connections.max.idle.ms``; 10 s keeps its housekeeping at its 1 s
    period) with ``max.connections`` set to N + 64 (one descriptor a client); measured once the legs are closed.
    ``paced`` False: the batches come as fast as the gateway answers them, the gateway closing legs early near its
    open-file limit."""
    results = []
    for n in ns:
        procs = -(-n // per_proc) if per_proc else 0
        with Tansu() as tansu:
            assert tansu.pid is not None
            results.append(("tansu", measure(tansu.pid, tansu.port, tansu.bootstrap, n, rounds, procs=procs)))
            print("tansu", results[-1][1], flush=True)
        with Tansu() as tansu:
            store = work / f"idle-{n}.db"
            open_store(store).close()
            extra: tuple[str, ...] = ()
            settle_s = 3.0
            if procs:
                config = work / f"gw-{n}.properties"
                config.write_text(f"quotaflow.upstream.connections.max.idle.ms={upstream_idle_ms}\n"
                                  f"max.connections={n + 64}\n")
                extra, settle_s = ("--config", str(config)), upstream_idle_ms / 1000 + 3.0
            gw = GatewayProcess(tansu.bootstrap, store, work / f"gw-{n}", extra_args=extra).start()
            try:
                assert gw.pid is not None
                results.append(("gateway", measure(gw.pid, gw.port, gw.bootstrap, n, rounds, procs=procs,
                                                   paced=bool(procs) and paced, settle_s=settle_s)))
                print("gateway", results[-1][1], flush=True)
                log = gw.log_path.read_text(errors="replace")
                if "Too many open files" in log:
                    print("gateway log: EMFILE", flush=True)
            finally:
                gw.stop()
    return results


def report(results: list[tuple[str, dict[str, float]]], command: str) -> str:
    lines = [
        f"- Command: `{command}`",
        f"- Machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.2f} at the end",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "- Figures (RSS and descriptor growth / N after the clients idled; producer 1 KB acks=1 round trips, ms):",
        "",
        "| target | N idle clients | descriptors per idle client | KB per idle client | RSS before -> with N (MB) "
        "| producer median / p99 idle | with N idle clients | after they closed (control) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results:
        lines.append(f"| {name} | {int(r['n']):,} | {r['fds_per_client']:.2f} | {r['kb_per_client']:.1f} | "
                     f"{r['rss_before_mb']:.0f} -> "
                     f"{r['rss_after_mb']:.0f} | {r['idle_med']:.2f} / {r['idle_p99']:.2f} | "
                     f"{r['held_med']:.2f} / {r['held_p99']:.2f} | {r['after_med']:.2f} / {r['after_p99']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1000,5000,20000")
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--per-proc", type=int, default=0,
                        help="hold the idle clients in holder processes of at most this many each (each has its own "
                             "open-file limit), the gateway closing idle upstream legs")
    parser.add_argument("--upstream-idle-ms", type=int, default=10_000)
    parser.add_argument("--unpaced", action="store_true",
                        help="with --per-proc: do not wait for the gateway's legs to close between batches")
    parser.add_argument("--hold", type=int, default=None, help=argparse.SUPPRESS)  # a holder child: the port
    parser.add_argument("--source", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hold is not None:
        hold(args.hold, args.source)
        return
    ns = descriptors_for([int(x) for x in args.clients.split(",")], 1 if args.per_proc else 2)
    with tempfile.TemporaryDirectory(prefix="quotaflow-idle-") as work:
        results = run(ns, args.rounds, Path(work), per_proc=args.per_proc, upstream_idle_ms=args.upstream_idle_ms,
                      paced=not args.unpaced)
    text = report(results, "python bench/idle_connections.py " + " ".join(sys.argv[1:]))
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
