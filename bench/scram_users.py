"""Can a client tell a SCRAM user that exists from one that does not? (issue 22 item 3)

    .venv/bin/python bench/scram_users.py [--logins 300] [--out FILE]

A ``quotaflow gateway`` subprocess in front of tansu, SCRAM-SHA-256 with ``connection.failed.authentication.delay.ms=0``
(so the failure delay, equal for both, does not hide anything). One raw socket per login, alternating a known user
with a wrong password and an unknown user: SaslHandshake, client-first, client-final. Reports what each side sees
(salt length, iteration count, error code and message) and the round-trip times of client-first -> server-first and
of client-final -> failure, median and p90, with their ratio (unknown / known), all from one run.
"""

from __future__ import annotations

import argparse
import base64
import os
import platform
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway_wire_latency import _exactly

from quotaflow.gateway.auth.scram import ScramClient
from quotaflow.store import open_store
from quotaflow.store.scram import scram_credential
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu

MECHANISM = "SCRAM-SHA-256"


def _call(sock: socket.socket, request: Any, version: int, cid: int) -> bytes:
    request.with_header(correlation_id=cid, client_id="bench")
    sock.sendall(bytes(request.encode(version=version, header=True, framed=True)))
    return _exactly(sock, struct.unpack(">i", _exactly(sock, 4))[0])


def login(address: tuple[str, int], user: str) -> dict[str, Any]:
    """One failing SCRAM login as a client sees it."""
    with socket.create_connection(address) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        handshake = SaslHandshakeResponse.decode(_call(sock, SaslHandshakeRequest[1](mechanism=MECHANISM), 1, 1),
                                                 version=1, header=True)
        assert handshake.error_code == 0
        client = ScramClient(MECHANISM, user, "wrong-password")
        start = time.perf_counter()
        first = SaslAuthenticateResponse.decode(
            _call(sock, SaslAuthenticateRequest[2](auth_bytes=client.first()), 2, 2), version=2, header=True)
        first_ms = (time.perf_counter() - start) * 1000
        server_first = bytes(first.auth_bytes)
        attrs = dict(part.split("=", 1) for part in server_first.decode().split(","))
        final_token = client.final(server_first)
        start = time.perf_counter()
        final = SaslAuthenticateResponse.decode(
            _call(sock, SaslAuthenticateRequest[2](auth_bytes=final_token), 2, 3), version=2, header=True)
        final_ms = (time.perf_counter() - start) * 1000
    return {"salt": len(base64.b64decode(attrs["s"])), "i": int(attrs["i"]), "code": final.error_code,
            "message": final.error_message, "first_ms": first_ms, "final_ms": final_ms}


def summary(rows: list[dict[str, Any]], key: str) -> tuple[float, float]:
    values = sorted(r[key] for r in rows)
    return statistics.median(values), values[int(len(values) * 0.9)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logins", type=int, default=300, help="logins per kind (known, unknown)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="quotaflow-bench-scram-") as tmp, Tansu() as tansu:
        work = Path(tmp)
        store = work / "quotas.db"
        with open_store(store) as s:
            s.put_scram_credential(scram_credential("alice", MECHANISM, "alice-secret"))
        config = work / "gateway.properties"
        config.write_text("connection.failed.authentication.delay.ms=0\n"
                          "quotaflow.sasl.failed.authentication.rate.per.ip=1000000\n")
        with GatewayProcess(tansu.bootstrap, store, work, extra_args=("--config", str(config))) as gw:
            address = ("127.0.0.1", gw.port)
            for _ in range(20):  # warm up both paths
                login(address, "alice")
                login(address, "nobody")
            known: list[dict[str, Any]] = []
            unknown: list[dict[str, Any]] = []
            for i in range(args.logins):
                known.append(login(address, "alice"))
                unknown.append(login(address, f"nobody-{i % 50}"))
    lines = [f"# SCRAM: known (wrong password) vs unknown users, {args.logins} logins each",
             f"host: {platform.node()}, {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}", "",
             "| what the client sees | known user | unknown user |", "|---|---|---|"]
    for field in ("salt", "i", "code", "message"):
        seen = [sorted({str(r[field]) for r in rows}) for rows in (known, unknown)]
        lines.append(f"| {field} | {seen[0]} | {seen[1]} |")
    for key in ("first_ms", "final_ms"):
        (k50, k90), (u50, u90) = summary(known, key), summary(unknown, key)
        lines.append(f"| {key} p50 / p90 | {k50:.3f} / {k90:.3f} | {u50:.3f} / {u90:.3f} (p50 ratio {u50 / k50:.2f}) |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
