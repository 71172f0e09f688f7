"""A wrong-password SASL/PLAIN flood for the hardening test and benchmark: ``python -m quotaflow.testing.sasl_flood
PORT SECONDS [THREADS]`` logs in as ``alice`` with a wrong password from THREADS threads (16) against 127.0.0.1:PORT
until SECONDS have passed, then prints how many logins failed. It runs as its own process so the attackers never take
the measuring client's GIL."""

from __future__ import annotations

import sys
import threading
import time

from quotaflow.admin.wire import KafkaWireConnection, SaslPlain
from quotaflow.core.errors import SaslAuthenticationFailedError
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


if __name__ == "__main__":
    print(flood(int(sys.argv[1]), float(sys.argv[2]), *(int(a) for a in sys.argv[3:4])))
