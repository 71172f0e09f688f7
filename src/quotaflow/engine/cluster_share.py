"""Cluster-wide quotas: each gateway's local share of a quota from every gateway's usage (docs/cluster-quotas.md).

Kafka enforces a quota per broker. With ``quotaflow.quota.scope=cluster`` every gateway reports its per-quota-id
rate each window and enforces a *share* ``q_g`` of the configured quota ``Q`` with the unchanged Kafka-exact
engine, so the fleet together admits ``Q``:

    floor = φ · Q / N
    q_g   = floor + (Q − N · floor) · r_g / max(R, r_g)     when R > 0
    q_g   = Q / N                                           when nobody reports usage for the quota-id

A participant ("gateway" above) is one set of engine managers: a gateway keeps one per upstream broker, as Kafka
enforces per broker, so a gateway in front of three brokers takes part three times. ``N`` is the number of live
participants that meter the quota-id (this gateway's own and every peer's heard from within the expiry, each with
a sensor for it), ``r_g`` the participant's own rate and ``R`` the sum of their rates. The shares sum to ``Q``;
the floor lets a quiet participant admit a new client and ramp up. A gateway that falls silent drops out of ``N``
once its last report is older than the expiry, and the survivors' shares grow back to ``Q`` between them. Pure
code: time is an argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Final, TypeAlias

from quotaflow.engine.quota_type import QuotaType

if TYPE_CHECKING:
    from quotaflow.engine.connection import ConnectionQuotas

DEFAULT_FLOOR_FRACTION: Final = 0.1  # φ
DEFAULT_EXPIRY_WINDOWS: Final = 3  # a peer silent for this many windows is gone
MAX_DECREASE_PER_WINDOW: Final = 2.0  # a share at most halves per window
SMOOTHING: Final = 0.3  # weight of the newest window in a published rate (an exponential moving average)
SHARED_TYPES: Final = (QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST)  # rates; not the token bucket



class ConnectionRate(Enum):
    """The KIP-612 connection quota shared with ``scope=cluster``: ``connection_creation_rate`` per client IP."""

    IP_CONNECTION_CREATION = "connection_creation_rate"


IP_CONNECTION_RATE: Final = ConnectionRate.IP_CONNECTION_CREATION
CONNECTIONS: Final = "connections"  # the participant of a gateway's connection quotas (its acceptors)

# (quota type, user tag, client-id tag): one quota-id of one quota type, as Kafka's metric tags name it; for the
# per-IP connection rate (IP_CONNECTION_RATE, ip, "")
UsageKey: TypeAlias = tuple[QuotaType | ConnectionRate, str, str]


def ip_key(ip: str) -> UsageKey:
    return (IP_CONNECTION_RATE, ip, "")


def local_share(quota: float, participants: int, own_rate: float, total_rate: float,
                floor_fraction: float = DEFAULT_FLOOR_FRACTION) -> float:
    """``q_g`` for one quota-id: demand-proportional with a floor, an even split without usage."""
    n = max(1, participants)
    own = max(0.0, own_rate)
    total = max(total_rate, own)  # the reports cover slightly different periods: never grant more than Q
    if total <= 0.0:
        return quota / n
    floor = floor_fraction * quota / n
    return floor + (quota - n * floor) * (own / total)  # the fraction first: a tiny rate times Q must not underflow


def limit_decrease(target: float, previous: float, elapsed_ms: int, window_ms: int,
                   factor: float = MAX_DECREASE_PER_WINDOW) -> float:
    """Lower a sensor's bound toward its new share by at most ``factor`` per window; raise it at once.

    Kafka's throttle time is ``(rate − bound) / bound × window``: a bound that falls far below the rate the
    participant was just allowed (its published rate lags a window behind) would throttle its next request for
    tens of windows, its rate would then read zero, and its share would stay at the floor (we saw a gateway get
    nothing for 12 s that way). Halving at most per window keeps each throttle near a window. Raising at once lets
    the survivors of a dead gateway take its share back within the expiry; the fleet can then admit a little more
    than Q while another participant's bound comes down."""
    if previous <= 0.0 or target >= previous:
        return target
    step: float = factor ** (max(0, elapsed_ms) / window_ms)
    return max(target, previous / step)


def smooth(previous: Mapping[UsageKey, float], current: Mapping[UsageKey, float],
           weight: float = SMOOTHING) -> dict[UsageKey, float]:
    """The rates a participant publishes: an exponential moving average of its Kafka rates, window by window.

    A throttled client's rate swings with Kafka's bursts (a window's worth at once, then silence); shares divided
    from raw rates swing with it, and every drop of a bound throttles for longer than the rise after it gives
    back, so the fleet admitted ~0.85 × Q. A quota-id seen for the first time starts at its current rate."""
    return {key: rate if key not in previous else weight * rate + (1.0 - weight) * previous[key]
            for key, rate in current.items()}


@dataclass(frozen=True, slots=True)
class UsageReport:
    """One participant's rates per quota-id for one window, and when this gateway received it (local clock).
    ``participant`` is ``<gateway id>/<broker>``."""

    participant: str
    received_ms: int
    rates: Mapping[UsageKey, float] = field(default_factory=dict)


def participant_id(gateway: str, broker: str) -> str:
    return f"{gateway}/{broker}"


@dataclass(slots=True)
class ShareTable:
    """The latest report of every peer participant; ``shares`` turns them and this gateway's own participants'
    rates into their local quotas. ``gateway`` is this gateway's id: reports of its own participants (echoed back by
    the topic) are ignored."""

    gateway: str
    window_ms: int
    expiry_windows: int = DEFAULT_EXPIRY_WINDOWS
    floor_fraction: float = DEFAULT_FLOOR_FRACTION
    peers: dict[str, UsageReport] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.window_ms < 1 or self.expiry_windows < 1 or not 0.0 <= self.floor_fraction <= 1.0:
            raise ValueError("window_ms and expiry_windows must be >= 1 and the floor fraction within [0, 1]")

    @property
    def expiry_ms(self) -> int:
        return self.expiry_windows * self.window_ms

    def receive(self, report: UsageReport) -> None:
        """Keep a peer participant's newest report (this gateway's own are ignored)."""
        if report.participant.startswith(self.gateway + "/"):
            return
        known = self.peers.get(report.participant)
        if known is None or report.received_ms >= known.received_ms:
            self.peers[report.participant] = report

    def expire(self, now_ms: int) -> list[str]:
        """Forget peers silent for longer than the expiry; returns who was dropped."""
        gone = [g for g, r in self.peers.items() if now_ms - r.received_ms > self.expiry_ms]
        for g in gone:
            del self.peers[g]
        return gone

    def live_peers(self, now_ms: int) -> list[UsageReport]:
        return [r for r in self.peers.values() if now_ms - r.received_ms <= self.expiry_ms]

    def shares(self, quotas: Mapping[UsageKey, float], local: Mapping[str, Mapping[UsageKey, float | None]],
               now_ms: int) -> dict[str, dict[UsageKey, float]]:
        """For each of this gateway's participants (``local``: its rate per quota-id it meters, None while it has
        none to report yet), the local quota of every quota-id it meters that has a configured cluster-wide value
        in ``quotas``. A participant without a rate yet gets the even split ``Q / N``: its demand is unknown, and
        a share near the floor would let Kafka's formula throttle its first burst for many windows."""
        peers = self.live_peers(now_ms)
        counts: dict[UsageKey, int] = {}  # N per quota-id: the live participants that meter it
        totals: dict[UsageKey, float] = {}
        for rates in [*local.values(), *(p.rates for p in peers)]:
            for key, rate in rates.items():
                if key in quotas:
                    counts[key] = counts.get(key, 0) + 1
                    totals[key] = totals.get(key, 0.0) + (rate or 0.0)
        return {
            participant: {key: quotas[key] / counts[key] if rate is None else
                          local_share(quotas[key], counts[key], rate, totals[key], self.floor_fraction)
                          for key, rate in rates.items() if key in quotas}
            for participant, rates in local.items()
        }


def share_ip_connection_rates(table: ShareTable, connections: ConnectionQuotas, gateway: str,
                              published: Mapping[UsageKey, float], now_ms: int, engine_now_ms: int,
                              elapsed_ms: int) -> tuple[dict[UsageKey, float], dict[UsageKey, float]]:
    """Bound every per-IP connection-rate sensor of one gateway to its share of the IP's quota, from the rates
    everyone published (``published``: this gateway's own, as last published). ``now_ms`` is the clock reports are
    judged by, ``engine_now_ms`` the connection quotas' clock. Returns the gateway's current per-IP accepted rates
    (what it publishes next) and the bounds applied. The IP participants take part in ``table`` like any other:
    N per IP is the live gateways that meter it."""
    usage = connections.ip_quota_usage(engine_now_ms)
    quotas = {ip_key(ip): quota for ip, (quota, _) in usage.items()}
    rates = {ip_key(ip): rate for ip, (_, rate) in usage.items()}
    participant = participant_id(gateway, CONNECTIONS)
    targets = table.shares(quotas, {participant: {key: published.get(key) for key in rates}}, now_ms)
    applied: dict[UsageKey, float] = {}
    for key, target in targets[participant].items():
        ip = key[1]
        previous = connections.ip_rate_bound(ip) or 0.0
        bound = applied[key] = limit_decrease(target, previous, elapsed_ms, table.window_ms)
        if bound != previous:
            connections.set_ip_rate_bound(ip, bound)
    return rates, applied
