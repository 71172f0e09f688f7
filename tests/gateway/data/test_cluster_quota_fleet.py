"""A fleet of N gateways sharing one cluster-wide quota (``quotaflow.quota.scope=cluster``), simulated on one clock:
each gateway's real engine (``Enforcement``) and real share loop (``ClusterQuotas.step``), its usage reports sent
through the real wire format to the peers with uneven delays, share turns that come late or are missed (an event
loop under load), and one flat-out producer per gateway that honours its throttles (KIP-219: nothing is sent
while the channel is muted). Deterministic: a seeded generator, no wall clock, no timing assertion.

What issue 37 asked of the fleet (bench/scale.py's fleet curve measures it with real processes): 1-8 gateways
hold the cluster quota within ±8 % of Q in sum, and no gateway is held below the floor φ·Q/N."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from quotaflow.core.entities import QuotaEntity
from quotaflow.engine.cluster_share import UsageReport
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.data.cluster_quota import ClusterQuotas, ClusterQuotaSettings, decode_report
from quotaflow.gateway.data.enforcement import Enforcement
from quotaflow.store.base import Snapshot

Q = 1_000_000.0  # producer_byte_rate of the client-id, bytes/s, cluster-wide
CLIENT = "shared"
USER = "ANONYMOUS"
WINDOW_MS = 1000  # quota.window.size.seconds=1, quota.window.num=3, expiry 2 windows: bench/scale.py's fleet
TICK_MS = 5
BATCH = 16_384  # a producer's request: one full batch every 10 ms while not muted, 1.6 MB/s offered per gateway
SEND_EVERY_MS = 10
FLOOR_FRACTION = 0.1


class Inbox:
    """The usage topic as one gateway reads it: reports handed over when they arrive."""

    def __init__(self) -> None:
        self.reports: list[UsageReport] = []
        self.rejected = 0

    def take(self) -> list[UsageReport]:
        out, self.reports = self.reports, []
        return out


@dataclass
class Gateway:
    name: str
    offered_every_ms: int = SEND_EVERY_MS  # a producer slower than flat out sends less often
    enforcement: Enforcement = field(init=False)
    shares: ClusterQuotas = field(init=False)
    inbox: Inbox = field(default_factory=Inbox)
    muted_until: int = 0
    next_turn: int = 0
    acked: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.enforcement = Enforcement(GatewayConfig(quota_window_num=3, quota_window_size_seconds=1))
        self.enforcement.load(Snapshot(1, {QuotaEntity(client_id=CLIENT): {"producer_byte_rate": Q}}))
        settings = ClusterQuotaSettings.from_properties({
            "quotaflow.quota.scope": "cluster", "quotaflow.quota.cluster.expiry.windows": "2",
            "quotaflow.quota.cluster.floor.fraction": str(FLOOR_FRACTION)})
        self.shares = ClusterQuotas(settings, lambda: {"0": self.enforcement}, "127.0.0.1:9", WINDOW_MS,
                                    gateway_id=self.name)
        self.shares.exchange = self.inbox  # type: ignore[assignment]

    def produce(self, now: int) -> None:
        """The gateway's Produce path with a byte-rate quota: record, throttle, mute (the bytes are acked)."""
        manager = self.enforcement.managers.produce
        throttle = manager.record_and_get_throttle_ms(USER, CLIENT, BATCH, now)
        if throttle > 0:
            manager.throttle(USER, CLIENT, throttle, now)
            self.muted_until = now + throttle
        self.acked.append((now, BATCH))

    def rate(self, start: int, end: int) -> float:
        return sum(n for t, n in self.acked if start <= t < end) * 1000 / (end - start)


def run(gateways: list[Gateway], until_ms: int, seed: int, *, traffic_from_ms: int = 3_000, late_ms: int = 900,
        turn_late_ms: int = 400, missed: float = 0.1) -> None:
    """The gateways' share loops run from the start, every quarter window, each up to ``turn_late_ms`` late and
    missed with probability ``missed``; each report reaches each peer after an independent delay of up to
    ``late_ms`` (so peers see reports out of step and some a window late). The producers start within 300 ms of
    ``traffic_from_ms``, each flat out (or at its own pace)."""
    rng = random.Random(seed)
    in_flight: list[tuple[int, Gateway, bytes]] = []  # (arrival, to, report)
    starts = {g.name: traffic_from_ms + rng.randrange(0, 300) for g in gateways}
    for g in gateways:
        g.next_turn = rng.randrange(0, WINDOW_MS)
    for now in range(0, until_ms, TICK_MS):
        arrived = [m for m in in_flight if m[0] <= now]
        in_flight = [m for m in in_flight if m[0] > now]
        for _, to, value in arrived:
            to.inbox.reports.extend(decode_report(value, now))
        for g in gateways:
            if now >= starts[g.name] and now % g.offered_every_ms == 0 and now >= g.muted_until:
                g.produce(now)
            if now >= g.next_turn:
                g.next_turn = now + WINDOW_MS // 4 + rng.randrange(0, turn_late_ms + 1)
                if rng.random() < missed:
                    continue  # the loop was busy: this turn never ran
                value = g.shares.step(now, now)
                if value is not None:
                    in_flight += [(now + rng.randrange(20, late_ms + 1), peer, value)
                                  for peer in gateways if peer is not g]


@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_flat_out_fleet_holds_the_cluster_quota(n: int, seed: int) -> None:
    """bench/scale.py's fleet curve: the producers start together on gateways that already know each other, 6 s
    of warm-up, then 12 s measured (whole multiples of the 3 s rate window)."""
    fleet = [Gateway(f"gw{i}") for i in range(n)]
    run(fleet, 21_000, seed)
    rates = [g.rate(9_000, 21_000) for g in fleet]
    assert 0.92 * Q <= sum(rates) <= 1.08 * Q, [round(r / Q, 3) for r in rates]
    assert min(rates) >= FLOOR_FRACTION * Q / n, [round(r / Q, 3) for r in rates]
    # and the flat-out gateways share alike: none is held to less than half of the even split
    assert min(rates) >= 0.5 * Q / n, [round(r / Q, 3) for r in rates]


def test_a_light_client_keeps_what_it_uses_and_the_rest_goes_to_the_flat_out_ones() -> None:
    """Uneven demand: one gateway's producer wants 0.08 × Q, the three others are flat out. The light one is
    not throttled below its demand, and the fleet still holds Q."""
    light = Gateway("light", offered_every_ms=200)  # 16 KB every 200 ms: 82 KB/s
    fleet = [light, *(Gateway(f"gw{i}") for i in range(3))]
    run(fleet, 21_000, seed=7)
    rates = [g.rate(9_000, 21_000) for g in fleet]
    assert light.rate(9_000, 21_000) >= 0.95 * BATCH * 1000 / 200, [round(r / Q, 3) for r in rates]
    assert 0.92 * Q <= sum(rates) <= 1.08 * Q, [round(r / Q, 3) for r in rates]
