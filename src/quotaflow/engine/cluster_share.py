"""Cluster-wide quotas: each gateway's local share of a quota from every gateway's usage (docs/cluster-quotas.md).

Kafka enforces a quota per broker. With ``quotaflow.quota.scope=cluster`` every gateway reports, each window, its
per-quota-id rate and whether the quota-id was throttled there, and enforces a *share* ``q_g`` of the configured
quota ``Q`` with the unchanged Kafka-exact engine, so the fleet together admits ``Q``. The shares are a max-min fair
split of ``Q`` over the participants' demands, with a floor:

    floor = φ · Q / N
    d_g   = ∞                              when g was throttled within the rate window (it wants more than it has)
    d_g   = max(floor, HEADROOM · r_g)     otherwise (what it uses, with room to grow)
    q_g   = min(d_g, L)                    with L such that Σ q_g = Q, when Σ d_g ≥ Q
    q_g   = d_g + (Q − Σ d_g) / N          when Σ d_g < Q (nobody needs more: the rest split evenly)
    q_g   = Q / N                          for a participant that has published nothing yet

A participant ("gateway" above) is one set of engine managers: a gateway keeps one per upstream broker, as Kafka
enforces per broker, so a gateway in front of three brokers takes part three times. ``N`` is the number of live
participants that meter the quota-id (this gateway's own and every peer's heard from within the expiry, each with
a sensor for it), ``r_g`` the participant's published rate. Every gateway divides the same published numbers, so the
shares sum to ``Q``; throttled participants get equal shares of what the others do not use, so flat-out clients
behind N gateways get ``Q / N`` each and the bounds stay put; the floor lets a quiet participant admit a new client
and ramp up. A gateway that falls silent drops out of ``N`` once its last report is older than the expiry, and the
survivors' shares grow back to ``Q`` between them. Pure code: time is an argument.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Final, TypeAlias

from quotaflow.engine.quota_type import QuotaType

if TYPE_CHECKING:
    from quotaflow.engine.connection import ConnectionQuotas

DEFAULT_FLOOR_FRACTION: Final = 0.1  # φ
DEFAULT_EXPIRY_WINDOWS: Final = 3  # a peer silent for this many windows is gone
MAX_RATE_OVER_BOUND: Final = 2.0  # a bound comes down to half the sensor's rate at most: throttles <= one window
HEADROOM: Final = 1.25  # an unthrottled participant's demand: its rate with this much room to grow
SMOOTHING: Final = 0.3  # weight of the newest window in a published rate (an exponential moving average)
SHARED_TYPES: Final = (QuotaType.PRODUCE, QuotaType.FETCH, QuotaType.REQUEST)  # rates; not the token bucket



class ConnectionRate(Enum):
    """The KIP-612 connection quota shared with ``scope=cluster``: ``connection_creation_rate`` per client IP."""

    IP_CONNECTION_CREATION = "connection_creation_rate"


IP_CONNECTION_RATE: Final = ConnectionRate.IP_CONNECTION_CREATION
CONNECTIONS: Final = "connections"  # the participant of a gateway's connection quotas (its acceptors)
PRESENCE: Final = "presence"  # a participant without rates in every report: an idle gateway is live too

# (quota type, user tag, client-id tag): one quota-id of one quota type, as Kafka's metric tags name it; for the
# per-IP connection rate (IP_CONNECTION_RATE, ip, "")
UsageKey: TypeAlias = tuple[QuotaType | ConnectionRate, str, str]


def ip_key(ip: str) -> UsageKey:
    return (IP_CONNECTION_RATE, ip, "")


def fair_shares(quota: float, demands: Sequence[float], floor_fraction: float = DEFAULT_FLOOR_FRACTION
                ) -> list[float]:
    """Split ``quota`` over the participants' ``demands`` (``inf``: throttled, wants more than it has), max-min
    fair: nobody gets more than its demand while another gets less than its own, nobody less than the floor
    ``φ · Q / N``, and the shares sum to exactly ``quota`` (what nobody demands is split evenly).

    Kafka's rate of a throttled client only shows the bound it was held to, not what it wants: dividing ``Q`` in
    proportion to such rates keeps whatever split the fleet happened to reach, lets it drift with every burst,
    and each drop of a bound throttles longer than the next rise gives back (8 flat-out gateways held 0.79 × Q,
    one of them nothing for 12 s). Throttled participants are therefore equals here, whatever their rate."""
    n = len(demands)
    if n == 0:
        return []
    floor = floor_fraction * quota / n
    wanted = [max(floor, d) for d in demands]
    total = sum(wanted)
    if total <= quota:
        extra = (quota - total) / n
        return [d + extra for d in wanted]
    remaining, left = quota, n
    for d in sorted(wanted):  # water-filling: the smallest demands are met first, the level L is what remains
        if d * left > remaining:
            break
        remaining -= d
        left -= 1
    if left == 0:  # every demand fits after all (the sum was over the quota by a rounding)
        return wanted
    level = remaining / left
    return [min(d, level) for d in wanted]


def demand(rate: float, throttled: bool) -> float:
    """A participant's demand for :func:`fair_shares` from what it published."""
    return float("inf") if throttled else HEADROOM * max(0.0, rate)


def limit_decrease(target: float, previous: float, rate: float, factor: float = MAX_RATE_OVER_BOUND) -> float:
    """Lower a sensor's bound toward its new share, but never below ``rate / factor`` (the rate the sensor reads
    now); raise it at once.

    Kafka's throttle time is ``(rate − bound) / bound × window``, the window being the sensor's samples (3 × 1 s in
    the fleet runs). With ``bound ≥ rate / 2`` a throttle lasts at most one such window: by its end every sample
    that made the rate has expired. A bound far below the rate (a participant that ran alone at ``Q``, then had its
    share cut to ``Q / 8``) throttled its client for 7 s, the last 4 with the rate already at zero: the fleet held
    0.74 × Q. The bound follows the rate down as the throttles empty the window. Raising at once lets the
    survivors of a dead gateway take its share back within the expiry; the fleet can then admit a little more than
    Q while another participant's bound comes down."""
    if target >= previous:
        return target
    return max(target, min(previous, rate / factor))


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
    """One participant's rates per quota-id for one window, the quota-ids it throttled, and when this gateway
    received it (local clock). ``participant`` is ``<gateway id>/<broker>``."""

    participant: str
    received_ms: int
    rates: Mapping[UsageKey, float] = field(default_factory=dict)
    throttled: Collection[UsageKey] = frozenset()  # quota-ids throttled within the rate window there


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

    def live_gateways(self, now_ms: int) -> int:
        """The gateways heard from within the expiry, this one included (every report names its gateway's
        ``PRESENCE`` participant, so an idle gateway counts too)."""
        return len({p.participant.rsplit("/", 1)[0] for p in self.live_peers(now_ms)} - {self.gateway}) + 1

    def shares(self, quotas: Mapping[UsageKey, float], local: Mapping[str, Mapping[UsageKey, float | None]],
               now_ms: int, throttled: Mapping[str, Collection[UsageKey]] | None = None
               ) -> dict[str, dict[UsageKey, float]]:
        """For each of this gateway's participants (``local``: its published rate per quota-id it meters, None while
        it has published none yet; ``throttled``: the quota-ids it published as throttled), the local quota of every
        quota-id it meters that has a configured cluster-wide value in ``quotas`` (:func:`fair_shares`). A
        participant without a rate yet gets ``Q`` over the live gateways (or over ``N``, if more): its demand is
        unknown, its peers may have started the quota-id at the same moment without having reported it yet (each
        would take all of ``Q``), and a share near the floor would let Kafka's formula throttle its first burst for
        many windows."""
        throttled = throttled or {}
        peers = self.live_peers(now_ms)
        # per quota-id, every live participant that meters it: (local participant or None, rate, throttled)
        rows: dict[UsageKey, list[tuple[str | None, float | None, bool]]] = {}
        for participant, rates in local.items():
            mine = throttled.get(participant, ())
            for key, rate in rates.items():
                if key in quotas:
                    rows.setdefault(key, []).append((participant, rate, key in mine))
        for peer in peers:
            for key, rate in peer.rates.items():
                if key in quotas:
                    rows.setdefault(key, []).append((None, rate, key in peer.throttled))
        # a participant that has not published a quota-id yet may be one of many starting at once: it gets Q over
        # the live gateways (this one included), metering the quota-id or not
        gateways = self.live_gateways(now_ms)
        out: dict[str, dict[UsageKey, float]] = {participant: {} for participant in local}
        for key, members in rows.items():
            if not any(member is not None for member, _, _ in members):
                continue
            quota, n = quotas[key], len(members)
            unknown = quota / max(n, gateways)
            split = fair_shares(quota, [unknown if rate is None else demand(rate, hot)
                                        for _, rate, hot in members], self.floor_fraction)
            for (member, rate, _), share in zip(members, split, strict=True):
                if member is not None:
                    out[member][key] = unknown if rate is None else share
        return out


def share_ip_connection_rates(table: ShareTable, connections: ConnectionQuotas, gateway: str,
                              published: Mapping[UsageKey, float], now_ms: int, engine_now_ms: int
                              ) -> tuple[dict[UsageKey, float], dict[UsageKey, float]]:
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
        bound = applied[key] = limit_decrease(target, previous, rates[key])
        if bound != previous:
            connections.set_ip_rate_bound(ip, bound)
    return rates, applied
