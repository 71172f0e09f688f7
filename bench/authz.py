"""Gateway CPU per request with Kafka's authorizer on (100 and 10,000 ACLs) vs off, in one run (issue 19).

    .venv/bin/python bench/authz.py [--requests 3000] [--rounds 3] [--out FILE]

Three gateway processes in front of one tansu, started by this script (``--serve`` mode: a ``Gateway`` on its own
interpreter, so its CPU is its own; started as ``quotaflow gateway`` starts one, with ``gc.freeze()`` after
start): without an authorizer, and with the StandardAuthorizer
(``quotaflow.core.authorizer``) holding 100 and 10,000 ACLs. The ACL sets are Kafka-shaped: most are literal topic
ACLs of other principals, some prefixed, a few wildcard, and the ones that let the bench's principal
(``User:ANONYMOUS`` on the PLAINTEXT listener) write and read its topics, so every request is authorized through
the index, not by a default. One raw connection per path sends one request at a time: a 1 KiB-record Produce
(v9, acks=1) and a Fetch (v11, one partition), ``--requests`` each per round, in short slices interleaved across
the three paths (rotated each time) so drift on a shared machine hits all alike. Reported: each gateway process's
CPU per request (nanosecond schedstat from /proc), median over the slices, and the ratio to the authorizer-off
gateway. Target: <= 1.1x.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gateway_wire_latency import _exactly, produce_frame
from kafka.protocol.consumer import FetchRequest

from quotaflow.core.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from quotaflow.testing.processes import stop_process
from quotaflow.testing.tansu import Tansu

PRINCIPAL = "User:ANONYMOUS"  # the PLAINTEXT listener's principal
TOPIC_PREFIX = "bench-authz-"
PATHS = {"off": 0, "off-again": 0, "100": 100, "10000": 10_000}  # label -> ACLs (0: no authorizer)
SLICE = 250  # requests per measurement


def bindings(n: int) -> list[object]:
    """``n`` ACL bindings: the bench principal's two (WRITE and READ on its prefix), then other principals' literal
    and prefixed topic ACLs, group ACLs, and one wildcard DENY for a principal that never connects."""
    from quotaflow.core.acl import AccessControlEntry, AclBinding, ResourcePattern

    def acl(rtype: ResourceType, name: str, pattern: PatternType, principal: str, op: AclOperation,
            allow: bool = True) -> AclBinding:
        permission = AclPermissionType.ALLOW if allow else AclPermissionType.DENY
        return AclBinding(ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, "*", op, permission))

    out = [acl(ResourceType.TOPIC, TOPIC_PREFIX, PatternType.PREFIXED, PRINCIPAL, AclOperation.WRITE),
           acl(ResourceType.TOPIC, TOPIC_PREFIX, PatternType.PREFIXED, PRINCIPAL, AclOperation.READ),
           acl(ResourceType.TOPIC, "*", PatternType.LITERAL, "User:mallory", AclOperation.ALL, allow=False)]
    i = 0
    while len(out) < n:
        tenant = f"User:tenant-{i % 500}"
        kind = i % 10
        if kind < 6:
            out.append(acl(ResourceType.TOPIC, f"orders-{i}", PatternType.LITERAL, tenant, AclOperation.WRITE))
        elif kind < 8:
            out.append(acl(ResourceType.TOPIC, f"team-{i}-", PatternType.PREFIXED, tenant, AclOperation.READ))
        else:
            out.append(acl(ResourceType.GROUP, f"group-{i}", PatternType.LITERAL, tenant, AclOperation.READ))
        i += 1
    return out[:n]


def serve(upstream: str, store: Path, acls: int) -> None:
    """The gateway process of one path: prints ``ready PORT`` and serves until killed."""
    from quotaflow.gateway.server import Gateway, new_event_loop

    authorizer = None
    if acls:
        from quotaflow.core.authorizer import StandardAuthorizer

        authorizer = StandardAuthorizer(bindings=bindings(acls))  # type: ignore[arg-type]
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    gateway = Gateway(upstream, {"PLAINTEXT": ("127.0.0.1", 0)}, store, authorizer=authorizer)
    loop.run_until_complete(gateway.start())
    gc.collect()  # as `quotaflow gateway` does after start: what lives for the whole process (the ACL index too)
    gc.freeze()  # stays out of the collector's scans
    print(f"ready {gateway.ports['PLAINTEXT']}", flush=True)
    loop.run_forever()


def fetch_frame(topic: str) -> bytes:
    t = FetchRequest.FetchTopic
    request = FetchRequest[11](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                               session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[], topics=[
                                   t(topic=topic, partitions=[t.FetchPartition(
                                       partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                                       partition_max_bytes=4096)])])
    request.with_header(correlation_id=2, client_id="bench")
    return bytes(request.encode(header=True, framed=True))


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` in nanoseconds (/proc/PID/task/*/schedstat: ns-precise, where /proc's
    utime/stime count 10 ms ticks)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total


def one_at_a_time(sock: socket.socket, frame: bytes, n: int) -> None:
    for _ in range(n):
        sock.sendall(frame)
        _exactly(sock, struct.unpack(">i", _exactly(sock, 4))[0])


def start_gateway(upstream: str, store: Path, acls: int) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(acls), "--upstream", upstream,
                             "--store", str(store)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("ready "):
        stop_process(proc, 5)
        raise RuntimeError(f"gateway with {acls} ACLs did not start: {line!r}")
    return proc, int(line.split()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--upstream", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--store", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve is not None:
        serve(args.upstream, args.store, args.serve)
        return
    kinds = ("produce", "fetch")
    cpu: dict[tuple[str, str], list[float]] = {(label, k): [] for label in PATHS for k in kinds}
    with tempfile.TemporaryDirectory() as tmp, Tansu() as tansu:
        procs: dict[str, tuple[subprocess.Popen[str], int]] = {}
        try:
            for label, n in PATHS.items():
                procs[label] = start_gateway(tansu.bootstrap, Path(tmp) / f"q-{label}.db", n)
            topic = f"{TOPIC_PREFIX}{time.time_ns()}"
            frames = {"produce": produce_frame(topic), "fetch": fetch_frame(topic)}
            socks = {label: socket.create_connection(("127.0.0.1", port)) for label, (_p, port) in procs.items()}
            for sock in socks.values():
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for frame in frames.values():  # topic auto-creation and warm-up
                    one_at_a_time(sock, frame, 200)
            # short slices, the paths interleaved and rotated: drift on a shared machine hits every path alike
            labels = list(PATHS)
            for r in range(args.rounds * max(1, args.requests // SLICE)):
                for label in labels[r % len(labels):] + labels[:r % len(labels)]:
                    for kind in kinds:
                        pid = procs[label][0].pid
                        c0 = cpu_ns(pid)
                        one_at_a_time(socks[label], frames[kind], SLICE)
                        cpu[(label, kind)].append((cpu_ns(pid) - c0) / SLICE / 1e3)
            for sock in socks.values():
                sock.close()
        finally:
            for proc, _port in procs.values():
                stop_process(proc, 5)
        toggled = {n: same_process(tansu.bootstrap, Path(tmp) / f"same-{n}.db", n, args.requests, args.rounds)
                   for n in (100, 10_000)}
    decision = decision_cost(frames)

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    lines = [
        "## Gateway authorization: CPU per request, authorizer on vs off (bench/authz.py)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared with other jobs), Python "
        f"{platform.python_version()}. Command: `.venv/bin/python bench/authz.py --requests {args.requests} "
        f"--rounds {args.rounds}`. Four `Gateway` processes (no quotas, no event log, `gc.freeze()` after start as "
        "`quotaflow gateway` does) in front of one tansu: two without an authorizer (the second shows the noise "
        "between two identical processes), one with 100 ACLs, one with 10,000. One raw connection each, one "
        f"request at a time, in slices of {SLICE} requests interleaved across the four; CPU of each gateway process "
        "from /proc/PID/task/*/schedstat, median over the slices; ratios to the first authorizer-off process.",
        "",
        "| request | off (µs) | off again | 100 ACLs | 10,000 ACLs |",
        "|---|---|---|---|---|",
    ]
    for kind in kinds:
        base = median(cpu[("off", kind)])
        cells = [f"{median(cpu[(label, kind)]):.0f} µs ({median(cpu[(label, kind)]) / base:.2f}x)"
                 for label in labels[1:]]
        lines.append(f"| {kind} | {base:.0f} | {' | '.join(cells)} |")
    lines += ["", "One gateway, its authorizer switched off and on between slices (same process, heap and connection; "
              "CPU of its event-loop thread from /proc/self/task/TID/schedstat, median over the slices):", "",
              "| request | 100 ACLs: off / on (µs) | ratio | 10,000 ACLs: off / on (µs) | ratio |",
              "|---|---|---|---|---|"]
    for kind in kinds:
        cells = [f"{toggled[n][('off', kind)]:.0f} / {toggled[n][('on', kind)]:.0f} | "
                 f"{toggled[n][('on', kind)] / toggled[n][('off', kind)]:.2f}x" for n in (100, 10_000)]
        lines.append(f"| {kind} | {' | '.join(cells)} |")
    lines += ["", "The authorization step alone, in-process (best of 5 x 20,000): `authorize.plan` per request, and "
              "with an authorizer `authorize.granted`, its cached answer (the hot path: every topic already allowed):",
              "", "| request | off: plan (µs) | 100 ACLs: plan / granted (µs) | 10,000 ACLs: plan / granted (µs) |",
              "|---|---|---|---|"]
    for kind in kinds:
        lines.append(f"| {kind} | {decision[(0, kind)]:.1f} | " + " | ".join(
            f"{decision[(n, kind)]:.1f} / {decision[(n, kind + ' granted')]:.1f}" for n in (100, 10_000)) + " |")
    lines += ["", "Target (issue 19): <= 1.1x."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


def same_process(upstream: str, store: Path, acls: int, requests: int, rounds: int) -> dict[tuple[str, str], float]:
    """CPU per request of one gateway's event-loop thread (this process, ``GatewayThread``), its authorizer switched
    off and on between slices: the same process, heap and connection for both, so only the authorization differs.
    Median µs per (mode, request)."""
    from quotaflow.core.authorizer import StandardAuthorizer
    from quotaflow.gateway.server import GatewayThread

    authorizer = StandardAuthorizer(bindings=bindings(acls))  # type: ignore[arg-type]
    thread = GatewayThread(upstream, {"PLAINTEXT": "127.0.0.1:0"}, store, authorizer=authorizer)
    thread.start()
    try:
        assert thread.gateway is not None and thread._thread is not None
        access, tid = thread.gateway.access, thread._thread.native_id
        gc.collect()
        gc.freeze()

        def loop_cpu_ns() -> int:
            return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])

        topic = f"{TOPIC_PREFIX}{time.time_ns()}"
        frames = {"produce": produce_frame(topic), "fetch": fetch_frame(topic)}
        out: dict[tuple[str, str], list[float]] = {(m, k): [] for m in ("off", "on") for k in frames}
        with socket.create_connection(thread.address()) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for frame in frames.values():
                one_at_a_time(sock, frame, 200)
            for i in range(rounds * max(1, requests // SLICE)):
                for mode in ("off", "on") if i % 2 else ("on", "off"):
                    access.authorizer = authorizer if mode == "on" else None
                    for kind, frame in frames.items():
                        c0 = loop_cpu_ns()
                        one_at_a_time(sock, frame, SLICE)
                        out[(mode, kind)].append((loop_cpu_ns() - c0) / SLICE / 1e3)
        return {key: sorted(v)[len(v) // 2] for key, v in out.items()}
    finally:
        thread.stop()


def decision_cost(frames: dict[str, bytes]) -> dict[tuple[int, str], float]:
    """µs per request of the gateway's authorization step (``authorize.plan``), in this process."""
    import timeit

    from quotaflow.core.authorizer import StandardAuthorizer
    from quotaflow.gateway.auth import authorize
    from quotaflow.gateway.auth.authz_audit import AuthzAudit
    from quotaflow.gateway.auth.hidden_topics import HiddenTopics
    from quotaflow.gateway.wire import protocol

    class Scope:
        principal = "ANONYMOUS"

    out = {}
    for n in (0, 100, 10_000):
        authorizer = StandardAuthorizer(bindings=bindings(n)) if n else None  # type: ignore[arg-type]
        access = authorize.Access(authorizer, HiddenTopics(), AuthzAudit())
        for kind, framed in frames.items():
            frame = framed[4:]
            header = protocol.parse_request_header(frame)
            best = min(timeit.repeat(lambda: authorize.plan(access, Scope(), header, frame, "127.0.0.1"),  # type: ignore[arg-type]  # noqa: B023
                                     number=20_000, repeat=5))
            out[(n, kind)] = best / 20_000 * 1e6
            if n:  # the plan above cached every decision: granted answers
                assert authorize.granted(access, Scope.principal, "127.0.0.1", header, frame) is None
                best = min(timeit.repeat(
                    lambda: authorize.granted(access, Scope.principal, "127.0.0.1", header, frame),  # noqa: B023
                    number=20_000, repeat=5))
                out[(n, kind + " granted")] = best / 20_000 * 1e6
    return out


if __name__ == "__main__":
    main()
