"""A wrong-password SASL/PLAIN flood and the real client it must not slow, for the hardening test and benchmark.

``python -m quotaflow.testing.sasl_flood PORT SECONDS [THREADS]`` logs in as ``alice`` with a wrong password from
THREADS threads (16) against 127.0.0.1:PORT until SECONDS have passed, then prints how many logins failed. It runs as
its own process so the attackers never take the measuring client's GIL. ``round_trip`` times the real client."""

from __future__ import annotations

import sys
import threading
import time
from statistics import median
from typing import Any

from quotaflow.admin.wire import KafkaWireConnection, SaslPlain, WireAdmin
from quotaflow.core.errors import SaslAuthenticationFailedError
from quotaflow.core.filters import QuotaFilter
from quotaflow.testing.ports import LOOPBACK


def flood(port: int, seconds: float, threads: int = 16) -> int:
    """Failed logins made by ``threads`` threads in ``seconds``."""
    deadline = time.monotonic() + seconds
    failed: list[int] = []

    def run() -> None:
        while time.monotonic() < deadline:
            try:
                KafkaWireConnection(LOOPBACK, port, sasl=SaslPlain("alice", "wrong-password"), timeout=10).close()
            except SaslAuthenticationFailedError:
                failed.append(1)
            except OSError:
                pass

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return len(failed)


def round_trip(address: str, producer: Any, rounds: int, topic: str = "hardening-rt") -> float:
    """Median seconds of one real-client round: a fresh SASL login as ``alice`` with a describe, then 5 produces
    acked through ``producer`` (a kafka-python ``KafkaProducer`` logged in as ``alice``)."""
    times = []
    for i in range(rounds):
        t0 = time.perf_counter()
        admin = WireAdmin(address, sasl=SaslPlain("alice", "alice-secret"))
        admin.describe(QuotaFilter())
        admin.close()
        for j in range(5):
            producer.send(topic, b"rt-%d-%d" % (i, j)).get(timeout=60)
        times.append(time.perf_counter() - t0)
    return median(times)


if __name__ == "__main__":
    print(flood(int(sys.argv[1]), float(sys.argv[2]), *(int(a) for a in sys.argv[3:4])))
