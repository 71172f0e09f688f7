"""Gateway CPU per request with Kafka's authorizer on (100 and 10,000 ACLs) vs off, in one run (issue 19).

    .venv/bin/python bench/authz.py [--requests 3000] [--rounds 3] [--out FILE]

Three gateway processes in front of one tansu, started by this script (``--serve`` mode: a ``Gateway`` on its own
interpreter, so its CPU is its own): without an authorizer, and with the StandardAuthorizer
(``quotaflow.core.authorizer``) holding 100 and 10,000 ACLs. The ACL sets are Kafka-shaped: most are literal topic
ACLs of other principals, some prefixed, a few wildcard, and the ones that let the bench's principal
(``User:ANONYMOUS`` on the PLAINTEXT listener) write and read its topics, so every request is authorized through
the index, not by a default. One raw connection per path sends one request at a time: a 1 KiB-record Produce
(v9, acks=1) then a Fetch (v11, one partition), ``--requests`` each, paths alternating for ``--rounds`` rounds so
drift on a shared machine hits all alike. Reported: each gateway process's user+system CPU per request (from
/proc) and the ratio to the authorizer-off gateway. Target: <= 1.1x.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gateway_wire_latency import cpu_seconds, produce_frame
from kafka.protocol.consumer import FetchRequest

from quotaflow.core.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from quotaflow.testing.processes import stop_process
from quotaflow.testing.tansu import Tansu

PRINCIPAL = "User:ANONYMOUS"  # the PLAINTEXT listener's principal
TOPIC_PREFIX = "bench-authz-"
SIZES = (0, 100, 10_000)  # 0: no authorizer


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


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


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
    cpu: dict[tuple[int, str], list[float]] = {(n, k): [] for n in SIZES for k in kinds}
    with tempfile.TemporaryDirectory() as tmp, Tansu() as tansu:
        procs: dict[int, tuple[subprocess.Popen[str], int]] = {}
        try:
            for n in SIZES:
                procs[n] = start_gateway(tansu.bootstrap, Path(tmp) / f"q{n}.db", n)
            topic = f"{TOPIC_PREFIX}{time.time_ns()}"
            frames = {"produce": produce_frame(topic), "fetch": fetch_frame(topic)}
            socks = {n: socket.create_connection(("127.0.0.1", port)) for n, (_p, port) in procs.items()}
            for sock in socks.values():
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for frame in frames.values():  # topic auto-creation and warm-up
                    one_at_a_time(sock, frame, 200)
            for _ in range(args.rounds):
                for n in SIZES:
                    for kind in kinds:
                        pid = procs[n][0].pid
                        c0 = cpu_seconds(pid)
                        one_at_a_time(socks[n], frames[kind], args.requests)
                        cpu[(n, kind)].append((cpu_seconds(pid) - c0) / args.requests * 1e6)
            for sock in socks.values():
                sock.close()
        finally:
            for proc, _port in procs.values():
                stop_process(proc, 5)

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    lines = [
        "## Gateway authorization: CPU per request, authorizer on vs off (bench/authz.py)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared with other jobs), Python "
        f"{platform.python_version()}. Command: `.venv/bin/python bench/authz.py --requests {args.requests} "
        f"--rounds {args.rounds}`. Three `Gateway` processes (no quotas, no event log) in front of one tansu, one "
        "raw connection each, one request at a time; CPU from /proc, median of the rounds.",
        "",
        "| request | authorizer off (µs) | 100 ACLs (µs) | ratio | 10,000 ACLs (µs) | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for kind in kinds:
        off, hundred, ten_k = (median(cpu[(n, kind)]) for n in SIZES)
        lines.append(f"| {kind} | {off:.0f} | {hundred:.0f} | {hundred / off:.2f}x | {ten_k:.0f} | "
                     f"{ten_k / off:.2f}x |")
    lines += ["", "Target (issue 19): <= 1.1x."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
