"""Per-IP connection creation rate with ``quotaflow.quota.scope=cluster`` across two gateway processes on one tansu
(docs/cluster-quotas.md): clients open connections from 127.0.0.1 to both gateways flat out against an ip quota of
Q connections/s; the two together admit about Q (not 2 × Q, Kafka's per-broker semantics: see
tests/engine/test_cluster_share_connections.py for that control). A connection counts as admitted when the gateway
answers an ApiVersions request on it; an IP-throttled one is held for its throttle and closed unanswered (KIP-612).
Kafka's windowed rate (3 samples of 1 s here) admits a flat-out IP in bursts, a cycle of about 4 s, so the rate is
the mean over 12 s (three cycles) after 4 s of warm-up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from quotaflow.core.entities import QuotaEntity
from quotaflow.store.kafka import KafkaStore
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.ports import LOOPBACK
from quotaflow.testing.tansu import Tansu, api_versions_probe

pytestmark = [pytest.mark.broker, pytest.mark.slow]

Q = 10  # connection_creation_rate of ip 127.0.0.1, connections/s
CONNECTORS = 24  # per gateway: an IP-throttled attempt is held up to a window (1 s), so ≥ 24 attempts/s each
CONFIG = """quota.window.size.seconds=1
quota.window.num=3
quotaflow.quota.cluster.expiry.windows=2
quotaflow.quota.scope=cluster
"""


class Connector:
    """Connections from 127.0.0.1 to one gateway, flat out on several threads; when each admitted one was answered."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.admitted: list[float] = []
        self.attempts = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(CONNECTORS)]

    def _run(self) -> None:
        while not self.stop.is_set():
            ok = api_versions_probe(LOOPBACK, self.port, timeout=2.0)
            self.attempts += 1
            if ok:
                self.admitted.append(time.monotonic())

    def rate(self, start: float, end: float) -> float:
        return sum(1 for t in self.admitted if start <= t < end) / (end - start)


@contextmanager
def connecting(gateways: list[GatewayProcess]) -> Iterator[list[Connector]]:
    running = [Connector(g.port) for g in gateways]
    for c in running:
        for t in c.threads:
            t.start()
    try:
        yield running
    finally:
        for c in running:
            c.stop.set()
        for c in running:
            for t in c.threads:
                t.join(5)


def test_cluster_scope_shares_the_ip_connection_rate(tansu: Tansu, tmp_path: Path) -> None:
    store = f"kafka://{tansu.bootstrap}/quotas-conn-{tmp_path.name[-12:]}"
    with KafkaStore(store) as s:
        s.alter([(QuotaEntity(ip="127.0.0.1"), {"connection_creation_rate": float(Q)})])
    config = tmp_path / "cluster.properties"
    config.write_text(CONFIG)
    with ExitStack() as stack:
        a, b = (stack.enter_context(GatewayProcess(tansu.bootstrap, store, tmp_path / name,
                                                   extra_args=("--config", str(config))))
                for name in ("a", "b"))
        with connecting([a, b]) as (ca, cb):
            start = time.monotonic()
            time.sleep(16)
            ra, rb = ca.rate(start + 4, start + 16), cb.rate(start + 4, start + 16)
        attempts = (ca.attempts + cb.attempts) / (time.monotonic() - start)
    print(f"scope=cluster, ip quota Q={Q}/s: admitted {ra:.2f} + {rb:.2f} = {(ra + rb) / Q:.3f} Q "
          f"({attempts:.0f} attempts/s offered)")
    assert attempts > 4 * Q, f"the clients offered only {attempts:.1f} connections/s"
    assert 0.7 * Q <= ra + rb <= 1.3 * Q, f"admitted {ra:.2f} + {rb:.2f} connections/s with scope=cluster, Q={Q}"
    assert min(ra, rb) > 0.04 * Q, (ra, rb)  # both gateways admit (each keeps at least about its floor share)
