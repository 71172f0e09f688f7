"""Issue 37 item 1: a burst of correct SASL/PLAIN logins (a reconnect storm after a gateway restart) against a
``quotaflow gateway`` process with the default settings and the default PBKDF2 cost.

    .venv/bin/python bench/login_burst.py [--clients 1000] [--users 1,20,100] [--out bench/results/login_burst.md]

For each user count U, a fresh gateway (cold login cache) in front of one tansu; ``--clients`` connections from 16
source addresses (127.0.0.2-127.0.0.17) log in at once (SaslHandshake v1 + SaslAuthenticate v1), client n as user
n mod U with the right password. Reported: how many were accepted, answered error 58 (SASL_AUTHENTICATION_FAILED:
fatal to a Java client) or closed unanswered (the hash queue's bound: the client reconnects), the burst's wall time,
how many reconnect rounds of the closed ones until all are in (at most 10), and the gateway's password hashes
(``/metrics``, all rounds). Bounded: every connection has a 120 s read timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import struct
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.store import open_store
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu

SOURCES = [f"127.0.0.{i}" for i in range(2, 18)]


def _frame(request: Any, version: int, cid: int) -> bytes:
    request.with_header(correlation_id=cid, client_id="burst")
    return bytes(request.encode(version=version, header=True, framed=True))


async def _recv(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def login(port: int, source: str, user: str, password: str) -> int | None:
    """The SaslAuthenticate error code, or None when the connection closed unanswered."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    except OSError:
        return None
    try:
        writer.write(_frame(SaslHandshakeRequest[1](mechanism="PLAIN"), 1, 1))
        handshake = await asyncio.wait_for(_recv(reader), 120)
        if SaslHandshakeResponse.decode(handshake, version=1, header=True).error_code:
            return -1
        writer.write(_frame(SaslAuthenticateRequest[1](auth_bytes=f"\0{user}\0{password}".encode()), 1, 2))
        answer = await asyncio.wait_for(_recv(reader), 120)
        return int(SaslAuthenticateResponse.decode(answer, version=1, header=True).error_code)
    except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
        return None
    finally:
        writer.close()


def sasl_counters(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        body = response.read().decode()
    prefix = "kafka_server_sasl_authentication_"
    return {name.removeprefix(prefix): float(value) for name, value in
            (line.split() for line in body.splitlines() if line.startswith(prefix))}


def burst(tansu: Tansu, work: Path, clients: int, users: int) -> dict[str, float]:
    store = work / f"burst-{users}.db"
    with open_store(store) as qs:
        for u in range(users):
            qs.put_credential(hash_password(f"svc-{u}", f"secret-{u}"))
    config = work / f"burst-{users}.properties"
    config.write_text("listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT\n")
    gw = GatewayProcess(tansu.bootstrap, store, work / f"gw-{users}", metrics=True,
                        extra_args=("--config", str(config))).start()
    try:
        async def run(who: list[int]) -> list[int | None]:
            return await asyncio.gather(*(login(gw.port, SOURCES[n % len(SOURCES)], f"svc-{n % users}",
                                                f"secret-{n % users}") for n in who))

        t0 = time.monotonic()
        codes = asyncio.run(run(list(range(clients))))
        wall = time.monotonic() - t0
        # the clients closed unanswered reconnect at once (a client's reconnect backoff is shorter than a hash
        # queue's wait), as many times as it takes, at most 10
        retry = [n for n, code in enumerate(codes) if code is None]
        rounds = 1
        while retry and rounds < 10:
            again = asyncio.run(run(retry))
            retry = [n for n, code in zip(retry, again, strict=True) if code is None]
            rounds += 1
        all_in = time.monotonic() - t0
        assert gw.http_url is not None
        counters = sasl_counters(gw.http_url)
    finally:
        gw.stop()
    return {"users": users, "clients": clients, "accepted": codes.count(0), "error58": codes.count(58),
            "closed": codes.count(None), "wall_s": wall, "rounds": rounds if not retry else -1, "all_in_s": all_in,
            "hashes": counters.get("password_hash_total", 0.0),
            "joined": counters.get("password_check_joined_total", 0.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--users", default="1,20,100")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    with Tansu() as tansu, tempfile.TemporaryDirectory(prefix="quotaflow-burst-") as work:
        for users in (int(u) for u in args.users.split(",")):
            rows.append(burst(tansu, Path(work), min(args.clients, 5000), users))
            print(rows[-1], flush=True)
    lines = [f"- Command: `python bench/login_burst.py --clients {args.clients} --users {args.users}`",
             f"- Machine: {platform.node()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the end",
             f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             "- Figures:", "",
             "| users | clients at once | accepted | error 58 | closed unanswered | burst s | all in after (rounds, s) "
             "| PBKDF2 hashes | joined |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['users']} | {r['clients']} | {r['accepted']} | {r['error58']} | {r['closed']} | "
                     f"{r['wall_s']:.1f} | {r['rounds']:.0f}, {r['all_in_s']:.1f} | {r['hashes']:.0f} | "
                     f"{r['joined']:.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
