"""KIP-612 connection quotas: Kafka's ``ConnectionQuotas`` as pure state, time passed in.

Three creation-rate levels share one :class:`~quotaflow.engine.rate.Rate` kernel: broker-wide
(``max.connection.creation.rate``), per listener (``listener.name.<l>.max.connection.creation.rate``) and per client
IP (``connection_creation_rate`` on ip entities, override else default; unset means never recorded). Broker and
listener violations become an *acceptor delay* (the connection is accepted later, never dropped); a per-IP
violation rolls the connection back out of every rate and raises :class:`ConnectionThrottledError` (the socket is
held for the bounded throttle and then closed). Connection *counts* (``max.connections``, per listener and per IP)
are kept here too, because the acceptor must wait for a free slot exactly like it waits for a rate delay.

Beyond Kafka's model (docs/quota-model.md): an ip quota may be a CIDR range (each address in it gets its own
sensor, held to the range's rate as if it had its own entity; exact ip > longest range > default), and a principal
may have a connection creation rate (``user=alice`` or the default user), checked once a connection authenticates:
over it, the connection is held for the bounded throttle and then closed, as an IP-throttled one is.

The acceptor drives it in two steps, as Kafka's ``inc`` does around its wait::

    delay = q.record_connection_and_get_throttle_ms(listener, now)   # acceptor sleeps ``delay``
    ... also wait while not q.connection_slot_available(listener) ...
    q.record_ip_connection_maybe_throttle(listener, ip, now2)        # may raise ConnectionThrottledError
    q.inc_count(listener, ip)                                        # may raise TooManyConnectionsError
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from quotaflow.core.cidr import RangeIndex, canonical_cidr, is_cidr
from quotaflow.core.errors import ConnectionThrottledError, InvalidConfigurationError, TooManyConnectionsError
from quotaflow.core.keys import INT_MAX
from quotaflow.engine.metrics import MetricSample
from quotaflow.engine.quota_utils import to_int32
from quotaflow.engine.rate import Rate
from quotaflow.engine.stats import DEFAULT_QUOTA_WINDOW_NUM, DEFAULT_QUOTA_WINDOW_SIZE_SECONDS, Avg

GROUP: Final = "socket-server-metrics"
ACCEPTOR_GROUP: Final = "Acceptor"
IP_SENSOR_EXPIRATION_MS: Final = 3600 * 1000
_RATE_CACHE_LIMIT: Final = 100_000


@dataclass(frozen=True, slots=True)
class ConnectionQuotaConfig:
    """The static and reloadable broker settings the connection quotas read (server.properties names in docs)."""

    quota_window_num: int = DEFAULT_QUOTA_WINDOW_NUM
    quota_window_size_seconds: int = DEFAULT_QUOTA_WINDOW_SIZE_SECONDS
    max_connection_creation_rate: int = INT_MAX
    listener_rates: Mapping[str, int] = field(default_factory=dict)
    max_connections: int = INT_MAX
    listener_max_connections: Mapping[str, int] = field(default_factory=dict)
    max_connections_per_ip: int = INT_MAX
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    inter_broker_listener: str | None = None


@dataclass(slots=True)
class _Listener:
    rate: Rate  # connection-accept-rate, bound = the listener's max.connection.creation.rate
    blocked: Rate  # acceptor blocked ms (unbounded), for the blocked-time percentage
    throttle: Avg = field(default_factory=Avg)
    ip_throttle: Avg = field(default_factory=Avg)
    max_connections: int = INT_MAX
    count: int = 0


def _by_name(per_listener: Mapping[str, int]) -> dict[str, int]:
    """Listener-keyed settings by lower-case name: ``listener.name.<l>.`` prefixes are lower case in Kafka."""
    return {name.lower(): value for name, value in per_listener.items()}


class ConnectionQuotas:
    """Broker / listener / IP connection-creation rates and connection counts of one broker."""

    def __init__(self, config: ConnectionQuotaConfig | None = None) -> None:
        cfg = config or ConnectionQuotaConfig()
        self.samples = cfg.quota_window_num
        self.window_ms = cfg.quota_window_size_seconds * 1000
        self.max_throttle_ms = self.window_ms  # boundedThrottleTime cap: one quota window
        self.inter_broker_listener = cfg.inter_broker_listener
        self.broker_rate = self._rate(float(cfg.max_connection_creation_rate))
        self._listeners: dict[str, _Listener] = {}
        self._listener_rate_cfg: dict[str, int] = _by_name(cfg.listener_rates)
        self._ip_default = INT_MAX
        self._ip_overrides: dict[str, int] = {}
        self._ip_sensors: dict[str, Rate] = {}
        self._ip_ranges: RangeIndex[int] = RangeIndex()
        self._ip_rate_cache: dict[str, int] = {}  # address -> its rate while ranges exist (cleared on updates)
        self._principal_default = INT_MAX
        self._principal_overrides: dict[str, int] = {}
        self._principal_sensors: dict[str, Rate] = {}
        self._principal_throttle = Avg()
        self.max_connections = cfg.max_connections
        self.max_connections_per_ip = cfg.max_connections_per_ip
        self.max_connections_per_ip_overrides: dict[str, int] = dict(cfg.max_connections_per_ip_overrides)
        self._listener_max_cfg: dict[str, int] = _by_name(cfg.listener_max_connections)
        self._counts: dict[str, int] = {}
        self.total_count = 0

    def _rate(self, bound: float | None, now_ms: int = 0) -> Rate:
        return Rate(self.samples, self.window_ms, bound, now_ms)

    # -- listeners ------------------------------------------------------------------------------------------------
    def add_listener(self, listener: str, rate: int | None = None, max_connections: int | None = None) -> None:
        """Register a listener; its rate sensor starts unlimited, then takes the listener-prefixed config."""
        state = _Listener(rate=self._rate(float(INT_MAX)), blocked=self._rate(None))
        self._listeners[listener] = state
        key = listener.lower()
        if rate is not None:
            self._listener_rate_cfg[key] = rate
        if max_connections is not None:
            self._listener_max_cfg[key] = max_connections
        state.rate.bound = float(self._listener_rate_cfg.get(key, INT_MAX))
        state.max_connections = self._listener_max_cfg.get(key, INT_MAX)

    def remove_listener(self, listener: str) -> None:
        self._listeners.pop(listener, None)

    @property
    def listeners(self) -> list[str]:
        return list(self._listeners)

    def is_protected(self, listener: str) -> bool:
        """``protectedListener``: the inter-broker listener, and only when more than one listener exists."""
        return listener == self.inter_broker_listener and len(self._listeners) > 1

    def _named(self, listener: str) -> list[_Listener]:
        """Listeners whose name matches case-insensitively (config prefixes are lower case, as Kafka's)."""
        key = listener.lower()
        return [state for name, state in self._listeners.items() if name.lower() == key]

    def _listener(self, listener: str) -> _Listener:
        try:
            return self._listeners[listener]
        except KeyError:
            raise KeyError(f"listener {listener!r} is not registered") from None

    # -- reconfiguration (updateMaxConnectionRate, updateIpConnectionRateQuota) ----------------------------------------
    def update_broker_max_connection_rate(self, rate: int) -> None:
        """``updateBrokerMaxConnectionRate``: replace the bound, keep the samples."""
        if rate < 0:
            raise InvalidConfigurationError(f"Invalid value {rate} for configuration max.connection.creation.rate")
        self.broker_rate.bound = float(rate)

    def update_listener_max_connection_rate(self, listener: str, rate: int | None) -> None:
        """``ListenerConnectionQuota.reconfigure``; None (unset) means unlimited; values ≤ 0 are rejected."""
        if rate is not None and rate <= 0:
            raise InvalidConfigurationError(f"Invalid max.connection.creation.rate {rate}")
        if rate is None:
            self._listener_rate_cfg.pop(listener.lower(), None)
        else:
            self._listener_rate_cfg[listener.lower()] = rate
        for state in self._named(listener):
            state.rate.bound = float(INT_MAX if rate is None else rate)

    def connection_rate_for_ip(self, ip: str) -> int:
        """The ip's own entity, else the longest CIDR range holding it, else the default."""
        if not self._ip_ranges:
            return self._ip_overrides.get(ip, self._ip_default)
        rate = self._ip_rate_cache.get(ip)
        if rate is None:
            rate = self._ip_ranges.rate_for(ip, self._ip_overrides, self._ip_default)
            if len(self._ip_rate_cache) >= _RATE_CACHE_LIMIT:
                self._ip_rate_cache.clear()
            self._ip_rate_cache[ip] = rate
        return rate

    def ip_range_for(self, ip: str) -> str | None:
        """The CIDR range that supplies the ip's rate (None: its own entity, the default or nothing)."""
        if ip in self._ip_overrides:
            return None
        found = self._ip_ranges.longest(ip)
        return None if found is None else found[0]

    def update_ip_connection_rate_quota(self, ip: str | None, rate: int | None) -> None:
        """``updateIpConnectionRateQuota``: ip None is the default entity, rate None removes the quota; an ip
        written as a CIDR range sets the range's rate (every address sensor is re-bounded, as for the default)."""
        if ip is not None and is_cidr(ip):
            cidr = canonical_cidr(ip)
            if rate is None:
                self._ip_ranges.remove(cidr)
            else:
                self._ip_ranges.set(cidr, rate)
            self._ip_rate_cache.clear()
            self._rebound_ip_sensors()
        elif ip is not None:
            if rate is None:
                self._ip_overrides.pop(ip, None)
            else:
                self._ip_overrides[ip] = rate
            self._ip_rate_cache.pop(ip, None)
            sensor = self._ip_sensors.get(ip)
            if sensor is not None:
                sensor.bound = float(self.connection_rate_for_ip(ip))
        else:
            self._ip_default = INT_MAX if rate is None else rate
            self._ip_rate_cache.clear()
            self._rebound_ip_sensors()

    def _rebound_ip_sensors(self) -> None:
        for addr, sensor in self._ip_sensors.items():
            q = float(self.connection_rate_for_ip(addr))
            if sensor.bound != q:
                sensor.bound = q

    # -- per-principal connection creation rate (beyond Kafka: checked at authentication) --------------------------
    def connection_rate_for_principal(self, principal: str) -> int:
        return self._principal_overrides.get(principal, self._principal_default)

    def update_principal_connection_rate_quota(self, principal: str | None, rate: int | None) -> None:
        """A ``user`` entity's connection_creation_rate: principal None is the default user, rate None removes."""
        if principal is None:
            self._principal_default = INT_MAX if rate is None else rate
        elif rate is None:
            self._principal_overrides.pop(principal, None)
        else:
            self._principal_overrides[principal] = rate
        for name, sensor in self._principal_sensors.items():
            q = float(self.connection_rate_for_principal(name))
            if sensor.bound != q:
                sensor.bound = q

    def record_principal_connection_and_get_throttle_ms(self, principal: str, now_ms: int) -> int:
        """An authenticated connection of ``principal``: recorded against its rate as KIP-612 records an IP's
        (no sensor while unlimited); over the rate it is un-recorded and the bounded throttle returned (the caller
        holds the connection that long, then closes it). 0: within the rate."""
        q = self.connection_rate_for_principal(principal)
        if q == INT_MAX:
            return 0
        throttle = self._record_keyed(self._principal_sensors, principal, q, now_ms)
        if throttle > 0:
            self._principal_throttle.record(float(throttle), now_ms)
        return throttle

    def _record_keyed(self, sensors: dict[str, Rate], key: str, quota: int, now_ms: int) -> int:
        """Record one connection into ``key``'s rate sensor (created, or re-created after an hour idle, at
        ``quota``); over the rate it is un-recorded there and the bounded throttle returned, else 0."""
        sensor = sensors.get(key)
        if sensor is None or now_ms - sensor.last_record_ms > IP_SENSOR_EXPIRATION_MS:
            sensor = sensors[key] = self._rate(float(quota), now_ms)
        throttle = self._record_and_throttle(sensor, now_ms)  # records, so it is the sensor's last record time
        if throttle > 0:
            sensor.record(-1.0, now_ms)
        return throttle

    def update_max_connections(self, maximum: int) -> None:
        self.max_connections = maximum

    def update_listener_max_connections(self, listener: str, maximum: int | None) -> None:
        if maximum is None:
            self._listener_max_cfg.pop(listener.lower(), None)
        else:
            self._listener_max_cfg[listener.lower()] = maximum
        for state in self._named(listener):
            state.max_connections = INT_MAX if maximum is None else maximum

    def update_max_connections_per_ip(self, default: int, overrides: Mapping[str, int]) -> None:
        self.max_connections_per_ip = default
        self.max_connections_per_ip_overrides = dict(overrides)

    def reconfigure(self, cfg: ConnectionQuotaConfig) -> None:
        """Apply the dynamic settings of a reloaded broker config. The window settings and
        ``inter.broker.listener.name`` are read-only in Kafka (restart to change them), so they are kept."""
        self.update_broker_max_connection_rate(cfg.max_connection_creation_rate)
        rates, maxes = _by_name(cfg.listener_rates), _by_name(cfg.listener_max_connections)
        for listener in set(self._listener_rate_cfg) | set(rates):
            if self._listener_rate_cfg.get(listener) != rates.get(listener):
                self.update_listener_max_connection_rate(listener, rates.get(listener))
        self.update_max_connections(cfg.max_connections)
        for listener in set(self._listener_max_cfg) | set(maxes):
            self.update_listener_max_connections(listener, maxes.get(listener))
        self.update_max_connections_per_ip(cfg.max_connections_per_ip, cfg.max_connections_per_ip_overrides)

    # -- the per-connection algorithm (ConnectionQuotas.inc) -----------------------------------------------------------
    def _record_and_throttle(self, rate: Rate, now_ms: int) -> int:
        return to_int32(rate.record_and_throttle(1.0, now_ms, self.max_throttle_ms))

    def record_connection_and_get_throttle_ms(self, listener: str, now_ms: int) -> int:
        """Step 2: record into the broker (unless protected) and listener rates; the acceptor delay in ms."""
        state = self._listener(listener)
        floor = 0 if self.is_protected(listener) else self._record_and_throttle(self.broker_rate, now_ms)
        throttle = max(floor, self._record_and_throttle(state.rate, now_ms))
        if throttle > 0:
            state.throttle.record(float(throttle), now_ms)
        return max(throttle, 0)

    def connection_slot_available(self, listener: str) -> bool:
        """Count limits: the listener's ``max.connections``, then broker-wide unless the listener is protected."""
        state = self._listener(listener)
        if state.count >= state.max_connections:
            return False
        return self.is_protected(listener) or self.total_count < self.max_connections

    def record_acceptor_blocked(self, listener: str, blocked_ms: int, now_ms: int) -> None:
        """Account acceptor blocking (rate delay and slot waits) for the blocked-time percentage."""
        self._listener(listener).blocked.record(float(blocked_ms), now_ms)

    def record_ip_connection_maybe_throttle(self, listener: str, ip: str, now_ms: int) -> None:
        """Step 4: per-IP rate at ``now_ms`` (after the acceptor's wait); on violation roll back and raise."""
        q = self.connection_rate_for_ip(ip)
        if q == INT_MAX:
            return
        state = self._listener(listener)
        throttle = self._record_keyed(self._ip_sensors, ip, q, now_ms)
        if throttle > 0:
            state.rate.record(-1.0, now_ms)
            if not self.is_protected(listener):
                self.broker_rate.record(-1.0, now_ms)
            state.ip_throttle.record(float(throttle), now_ms)
            raise ConnectionThrottledError(ip, now_ms, throttle)

    def max_connections_for_ip(self, ip: str) -> int:
        return self.max_connections_per_ip_overrides.get(ip, self.max_connections_per_ip)

    def inc_count(self, listener: str, ip: str) -> None:
        """Step 5: count the connection; over the per-IP count limit it stays counted and the error is raised (the
        caller closes the socket and calls :meth:`dec`)."""
        state = self._listener(listener)
        count = self._counts.get(ip, 0)
        self._counts[ip] = count + 1
        self.total_count += 1
        state.count += 1
        maximum = self.max_connections_for_ip(ip)
        if count >= maximum:
            raise TooManyConnectionsError(ip, maximum)

    def inc(self, listener: str, ip: str, now_ms: int) -> int:
        """Kafka's ``inc`` for a caller that does not wait (the MockTime unit tests): record the broker/listener
        rates, check the IP rate at the same instant, count. Returns the acceptor delay it would have waited."""
        delay = self.record_connection_and_get_throttle_ms(listener, now_ms)
        self.record_ip_connection_maybe_throttle(listener, ip, now_ms + delay)
        self.inc_count(listener, ip)
        return delay

    def dec(self, listener: str, ip: str) -> None:
        count = self._counts.get(ip)
        if count is None:
            raise ValueError(f"Attempted to decrease connection count for address with no connections, address: /{ip}")
        if count == 1:
            del self._counts[ip]
        else:
            self._counts[ip] = count - 1
        self.total_count -= 1
        state = self._listeners.get(listener)
        if state is not None:
            state.count -= 1

    def get(self, ip: str) -> int:
        """Open connections from ``ip``."""
        return self._counts.get(ip, 0)

    def listener_count(self, listener: str) -> int:
        return self._listener(listener).count

    # -- metrics (socket-server-metrics) -------------------------------------------------------------------------------
    def ip_rate_bound(self, ip: str) -> float | None:
        """The bound of the IP's rate metric, None when the metric does not exist (never recorded)."""
        sensor = self._ip_sensors.get(ip)
        return None if sensor is None else sensor.bound

    def ip_quota_usage(self, now_ms: int) -> dict[str, tuple[float, float]]:
        """Per IP with a creation-rate quota that tried to connect within the rate's samples (``quota.window.num``
        windows; throttled attempts count): (configured quota, accepted connections per second). With
        ``quotaflow.quota.scope=cluster`` a gateway publishes the rates and bounds each sensor to its share; the
        report grows with the recently active addresses, not with every sensor kept for an hour. Judged by the
        last attempt, not by the rate: a flat-out IP's windowed rate reads 0 between bursts, and an IP left out of
        the report makes the peers count this gateway out of its quota."""
        recent_ms = self.samples * self.window_ms
        out: dict[str, tuple[float, float]] = {}
        for ip, sensor in self._ip_sensors.items():
            quota = self.connection_rate_for_ip(ip)
            if quota != INT_MAX and now_ms - sensor.last_record_ms <= recent_ms:
                out[ip] = (float(quota), max(0.0, sensor.measure(now_ms)))
        return out

    def set_ip_rate_bound(self, ip: str, bound: float) -> None:
        """Bound an IP's rate sensor below its configured quota (its cluster-wide share); a store change of the ip
        quota puts the configured value back until the next share is applied."""
        sensor = self._ip_sensors.get(ip)
        if sensor is not None:
            sensor.bound = bound

    def listener_rate_bound(self, listener: str) -> float | None:
        return self._listener(listener).rate.bound

    def expire_sensors(self, now_ms: int) -> None:
        """Drop IP sensors idle for more than an hour (Kafka's ExpireSensorTask), bounding memory under storms."""
        for sensors in (self._ip_sensors, self._principal_sensors):
            stale = [k for k, s in sensors.items() if now_ms - s.last_record_ms > IP_SENSOR_EXPIRATION_MS]
            for k in stale:
                del sensors[k]

    def metric_samples(self, now_ms: int) -> Iterator[MetricSample]:
        """Kafka's names and tags. Per-listener and per-IP rates share ``connection-accept-rate``; both carry the
        ``listener`` and ``ip`` labels (one empty) so a Prometheus family has one label set."""
        self.expire_sensors(now_ms)
        yield MetricSample("broker-connection-accept-rate", GROUP, (), self.broker_rate.measure(now_ms),
                           "broker-wide accepted connections per second")
        for name, state in self._listeners.items():
            yield MetricSample("connection-accept-rate", GROUP, (("listener", name), ("ip", "")),
                               state.rate.measure(now_ms), "accepted connections per second")
        for ip, sensor in self._ip_sensors.items():
            yield MetricSample("connection-accept-rate", GROUP, (("listener", ""), ("ip", ip)),
                               sensor.measure(now_ms), "accepted connections per second")
        for principal, sensor in self._principal_sensors.items():
            yield MetricSample("principal-connection-accept-rate", GROUP, (("user", principal),),
                               sensor.measure(now_ms), "authenticated connections per second of a principal")
        if self._principal_sensors:
            yield MetricSample("principal-connection-accept-throttle-time", GROUP, (),
                               self._principal_throttle.measure(now_ms),
                               "average hold (ms) of connections closed for their principal's connection rate")
        for name, state in self._listeners.items():
            tags = (("listener", name),)
            yield MetricSample("connection-accept-throttle-time", GROUP, tags, state.throttle.measure(now_ms),
                               "average acceptor delay (ms) of broker/listener-throttled connections")
            yield MetricSample("ip-connection-accept-throttle-time", GROUP, tags, state.ip_throttle.measure(now_ms),
                               "average hold (ms) of IP-throttled connections")
        for name, state in self._listeners.items():
            yield MetricSample("connection-count", GROUP, (("listener", name),), float(state.count),
                               "open connections (max.connections bounds them; past it the acceptor waits)")
        for name, state in self._listeners.items():
            blocked = state.blocked.measure(now_ms) / 10.0  # ms blocked per second → percent of time
            yield MetricSample("AcceptorBlockedPercent", ACCEPTOR_GROUP, (("listener", name),), min(blocked, 100.0),
                               "percent of time the acceptor was blocked on connection quotas")
