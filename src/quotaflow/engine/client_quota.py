"""``ClientQuotaManager`` (KIP-55 / KIP-124 / KIP-599): one instance per :class:`QuotaType`.

Who shares a quota is decided by the quota-id tags (``core.precedence.quota_tags`` over the override map, keyed by
*sanitized* user and raw client-id, driven by the ``quotaTypesEnabled`` mask); each quota-id has one quota sensor
(:mod:`quotaflow.engine.sensors`). The differences between quota types are small: request throttles are capped at
one window, controller mutations use a token bucket checked before recording, fetch un-records throttled bytes
(:mod:`quotaflow.engine.throttle`). Nothing is recorded while no quota exists. Time is always an argument.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Final, Literal, NamedTuple

from quotaflow.core.entities import DEFAULT, Part
from quotaflow.core.keys import UNLIMITED
from quotaflow.core.precedence import (
    ClientIdPrefix,
    ClientKey,
    QuotaTypeBit,
    entity_bit,
    quota_limit,
    quota_tags,
)
from quotaflow.core.prefixes import PrefixIndex
from quotaflow.core.sanitize import sanitize
from quotaflow.engine.controller_mutation import (
    ControllerMutationQuota,
    PermissiveControllerMutationQuota,
    StrictControllerMutationQuota,
    UnboundedControllerMutationQuota,
)
from quotaflow.engine.metrics import MetricSample
from quotaflow.engine.quota_type import QuotaType
from quotaflow.engine.quota_utils import keeps_oversized_fetch, to_int32
from quotaflow.engine.rate import Rate
from quotaflow.engine.sensors import QuotaSensor, RateSensor, TokenBucketSensor
from quotaflow.engine.stats import DEFAULT_QUOTA_WINDOW_NUM, DEFAULT_QUOTA_WINDOW_SIZE_SECONDS, Avg, CumulativeSum

QuotaTypesTracking = Literal["refcount", "monotonic"]

INACTIVE_SENSOR_EXPIRATION_MS: Final = 3600 * 1000
NANOS_TO_PERCENT: Final = 100.0 / 1e9  # ClientRequestQuotaManager.NanosToPercentagePerSecond
DOUBLE_MAX: Final = 1.7976931348623157e308
_TAG_CACHE_LIMIT: Final = 200_000


class QuotaId(NamedTuple):
    """The metric tags ``{user, client-id}`` naming a shared quota ("" = not part of the quota-id)."""

    user: str
    client_id: str

    def sensor_name(self, quota_type: QuotaType) -> str:
        """``Produce-ANONYMOUS:client1``."""
        return f"{quota_type.group}-{self.user}:{self.client_id}"

    def throttle_sensor_name(self, quota_type: QuotaType) -> str:
        return f"{quota_type.group}ThrottleTime-{self.user}:{self.client_id}"

    @property
    def tags(self) -> tuple[tuple[str, str], tuple[str, str]]:
        return (("user", self.user), ("client-id", self.client_id))


def nanos_to_percent(nanos: int | float) -> float:
    """Thread time in ns → request_percentage units (one thread fully busy for a second = 100)."""
    return nanos * NANOS_TO_PERCENT


class ClientQuotaManager:
    """Kafka's per-type client quota manager, with Kafka 4.1 reference-counted or ≤ 4.0 monotonic mask."""

    def __init__(
        self,
        quota_type: QuotaType,
        samples: int = DEFAULT_QUOTA_WINDOW_NUM,
        window_seconds: int = DEFAULT_QUOTA_WINDOW_SIZE_SECONDS,
        quota_types_tracking: QuotaTypesTracking = "refcount",
        *,
        metrics_samples: int = 2,
        metrics_window_ms: int = 30_000,
        sensor_expiration_ms: int = INACTIVE_SENSOR_EXPIRATION_MS,
    ) -> None:
        if samples < 1:
            raise ValueError("The number of samples must be at least 1.")
        if window_seconds < 1:
            raise ValueError("quota.window.size.seconds must be at least 1")
        if quota_types_tracking not in ("refcount", "monotonic"):
            raise ValueError(f"quota_types_tracking must be 'refcount' or 'monotonic', not {quota_types_tracking!r}")
        self.quota_type = quota_type
        self.samples = samples
        self.window_seconds = window_seconds
        self.window_ms = window_seconds * 1000
        self.tracking: QuotaTypesTracking = quota_types_tracking
        self.metrics_samples = metrics_samples
        self.metrics_window_ms = metrics_window_ms
        self.sensor_expiration_ms = sensor_expiration_ms
        # request time is capped at one window; produce/fetch are unbounded
        self._max_throttle_ms = self.window_ms if quota_type is QuotaType.REQUEST else None
        self.overrides: dict[ClientKey, float] = {}
        self.prefixes = PrefixIndex()  # the client-id-prefix entities among the overrides
        self._mask = 0
        self.quotas_enabled = False  # any quota of this type (mask != 0): a plain attribute, asked per request
        self._bit_counts = {bit: 0 for bit in (QuotaTypeBit.CLIENT_ID, QuotaTypeBit.USER, QuotaTypeBit.USER_CLIENT_ID)}
        self._sensors: dict[QuotaId, QuotaSensor] = {}
        self.generation = 0
        """Changes whenever the sensor a (user, client-id) records into may change other than by its first
        creation: a quota change (the quota-id and bound may move), an expired sensor replaced or removed. A caller
        that keeps a sensor (:meth:`recording_sensor`) records into it directly while this is unchanged and the
        sensor has not expired, and the records are the ones :meth:`record_and_get_throttle_ms` would make."""
        self._throttle_sensors: dict[QuotaId, Avg] = {}
        self._throttle_last_ms: dict[QuotaId, int] = {}
        self._throttled_until: dict[QuotaId, int] = {}  # when the latest throttle of a quota-id ends
        self.new_sensor_divisor = 1  # a new sensor's bound is the configured limit over this (cluster scope: 1..N)
        self._sanitized: dict[str, str] = {}
        self._tags: dict[tuple[str, str], QuotaId] = {}
        self._delay_queue: list[int] = []  # end times of throttled channels (a min-heap)
        self._queue_size = CumulativeSum()
        self.exempt: Rate | None = Rate(metrics_samples, metrics_window_ms) if quota_type is QuotaType.REQUEST else None

    # -- configuration ------------------------------------------------------------------------------------------
    @property
    def quota_types_enabled(self) -> int:
        """The ``quotaTypesEnabled`` bitmask (CLIENT_ID=1, USER=2, USER_CLIENT_ID=4)."""
        return self._mask

    def _user_key(self, user: Part) -> Part:
        return user if user is None or user is DEFAULT else sanitize(user)  # type: ignore[arg-type]

    def update_quota(self, user: Part, client_id: Part, value: float | None, *,
                     client_id_prefix: str | None = None) -> None:
        """Set (or, with None, remove) the quota of entity (user, client_id); names are raw, None = absent.
        ``client_id_prefix`` names a prefix entity instead (user and client_id then None)."""
        key: ClientKey
        if client_id_prefix is not None:
            if user is not None or client_id is not None:
                raise ValueError("a client-id-prefix entity has no user or client-id part")
            key = (None, ClientIdPrefix(client_id_prefix))
            if value is None:
                self.prefixes.discard(client_id_prefix)
            else:
                self.prefixes.add(client_id_prefix)
        elif user is None and client_id is None:
            raise ValueError("a client quota entity needs a user or a client-id part")
        else:
            key = (self._user_key(user), client_id)
        bit = entity_bit(*key)
        present = key in self.overrides
        if self.tracking == "monotonic":
            self._mask |= bit
        elif value is not None and not present:
            self._bit_counts[bit] += 1
            self._mask |= bit
        elif value is None and present:
            self._bit_counts[bit] -= 1
            if self._bit_counts[bit] == 0:
                self._mask &= ~bit
        self.quotas_enabled = self._mask != 0
        self.generation += 1
        if value is None:
            self.overrides.pop(key, None)
        else:
            self.overrides[key] = float(value)
        self._tags.clear()
        # a default or a prefix can apply to many quota-ids: every metric is checked
        scan = key[0] is DEFAULT or key[1] is DEFAULT or client_id_prefix is not None
        self._update_metric_configs(None if scan else key)

    def _update_metric_configs(self, updated: ClientKey | None) -> None:
        """Kafka's rule: a single metric when one quota level is in use and a non-default entity changed,
        otherwise a scan of every quota metric. Configs are replaced, samples kept."""
        if updated is not None and self._mask in (0, 1, 2, 4):
            user, client = updated
            qid = QuotaId(user if isinstance(user, str) else "", client if isinstance(client, str) else "")
            sensor = self._sensors.get(qid)
            if sensor is not None:
                sensor.set_bound(self.limit_for(qid))
            return
        for qid, sensor in self._sensors.items():
            bound = self.limit_for(qid)
            if bound != sensor.bound:
                sensor.set_bound(bound)

    # -- lookups --------------------------------------------------------------------------------------------------
    def sanitized_user(self, user: str) -> str:
        s = self._sanitized.get(user)
        if s is None:
            if len(self._sanitized) > _TAG_CACHE_LIMIT:
                self._sanitized.clear()
            s = self._sanitized[user] = sanitize(user)
        return s

    def quota_id(self, user: str, client_id: str) -> QuotaId:
        """The quota-id (metric tags) for a raw user principal name and a raw client-id."""
        qid = self._tags.get((user, client_id))
        if qid is None:
            if len(self._tags) > _TAG_CACHE_LIMIT:
                self._tags.clear()
            qid = QuotaId(*quota_tags(self.overrides, self._mask, self.sanitized_user(user), client_id,
                                      self.prefixes))
            self._tags[(user, client_id)] = qid
        return qid

    def configured_limit(self, qid: QuotaId) -> float | None:
        """``DefaultQuotaCallback.quotaLimit`` for a quota-id: the configured value, None when none applies."""
        return quota_limit(self.overrides, qid.user, qid.client_id)

    def limit_for(self, qid: QuotaId) -> float:
        """The bound a quota-id's metric gets: its configured value or ``Long.MAX_VALUE`` (unlimited)."""
        limit = quota_limit(self.overrides, qid.user, qid.client_id)
        return UNLIMITED if limit is None else limit

    def quota_limit(self, user: str, client_id: str) -> float:
        """``quota(user, clientId).bound``: the limit that applies to this user/client-id (UNLIMITED if none). The
        gateway keeps its per-request answer itself (``Enforcement.produce_limited``), so nothing is cached here."""
        if not self._mask:
            return UNLIMITED
        return self.limit_for(self.quota_id(user, client_id))

    def max_value_in_quota_window(self, user: str, client_id: str) -> float:
        """``limit × (samples − 1) × windowSeconds``; ``Double.MAX_VALUE`` with no quota (caps fetch max_bytes)."""
        if not self._mask:
            return DOUBLE_MAX
        limit = self.configured_limit(self.quota_id(user, client_id))
        return DOUBLE_MAX if limit is None else limit * (self.samples - 1) * self.window_seconds

    # -- sensors --------------------------------------------------------------------------------------------------
    def _new_sensor(self, qid: QuotaId, now_ms: int) -> QuotaSensor:
        bound = self.limit_for(qid)
        if self.new_sensor_divisor > 1 and bound < UNLIMITED:
            # quotaflow.quota.scope=cluster: the live gateways' even split until the next share update; at the
            # configured value, Kafka's first window (2 s at 3 samples) let each of N gateways starting a client at
            # once admit 2 x Q before its first throttle
            bound /= self.new_sensor_divisor
        if self.quota_type is QuotaType.CONTROLLER_MUTATION:
            return TokenBucketSensor(self.samples, self.window_ms, bound, now_ms, self.metrics_samples,
                                     self.metrics_window_ms)
        return RateSensor(self.samples, self.window_ms, bound, now_ms)

    def sensor(self, user: str, client_id: str, now_ms: int) -> QuotaSensor:
        """Get or create the quota sensor of this user/client-id's quota-id (an expired one starts afresh)."""
        qid = self.quota_id(user, client_id)
        sensor = self._sensors.get(qid)
        if sensor is None or now_ms - sensor.last_record_ms > self.sensor_expiration_ms:
            sensor = self._replace_sensor(qid, sensor, now_ms)
        return sensor

    def _replace_sensor(self, qid: QuotaId, old: QuotaSensor | None, now_ms: int) -> QuotaSensor:
        """A new sensor for ``qid``: its first, or a fresh one for an expired ``old`` (a change of
        :attr:`generation`: whoever kept the old one must look again)."""
        if old is not None:
            self.generation += 1
        sensor = self._sensors[qid] = self._new_sensor(qid, now_ms)
        return sensor

    def recording_sensor(self, user: str, client_id: str, now_ms: int) -> QuotaSensor | None:
        """The sensor :meth:`record_and_get_throttle_ms` at ``now_ms`` records into (made now if it would make
        it), None while no quota of this type exists (nothing is recorded then). Kept by a caller that records
        into it itself, valid while :attr:`generation` is unchanged and ``now_ms − sensor.last_record_ms`` is
        within :attr:`sensor_expiration_ms` (the gateway's connection-bound Produce path)."""
        return self.sensor(user, client_id, now_ms) if self._mask else None

    def existing_sensor(self, user: str, client_id: str) -> QuotaSensor | None:
        """The quota sensor if it exists (never creates one)."""
        return self._sensors.get(self.quota_id(user, client_id))

    def quota_sensors(self) -> list[tuple[QuotaId, QuotaSensor]]:
        """Every quota-id with a sensor (cluster-wide quotas read their rates and set their bounds)."""
        return list(self._sensors.items())

    @property
    def sensor_count(self) -> int:
        return len(self._sensors)

    def sensor_names(self) -> list[str]:
        """Kafka sensor names currently registered (quota and throttle-time sensors)."""
        names = [qid.sensor_name(self.quota_type) for qid in self._sensors]
        names += [qid.throttle_sensor_name(self.quota_type) for qid in self._throttle_sensors]
        return names

    def expire_sensors(self, now_ms: int) -> int:
        """Remove sensors inactive for longer than the expiration (Kafka's ExpireSensorTask); returns how many."""
        limit = self.sensor_expiration_ms
        dead = [q for q, s in self._sensors.items() if now_ms - s.last_record_ms > limit]
        for q in dead:
            del self._sensors[q]
        if dead:
            self.generation += 1
        dead_t = [q for q, t in self._throttle_last_ms.items() if now_ms - t > limit]
        for q in dead_t:
            del self._throttle_sensors[q]
            del self._throttle_last_ms[q]
            self._throttled_until.pop(q, None)
        return len(dead) + len(dead_t)

    # -- recording ------------------------------------------------------------------------------------------------
    def record_and_get_throttle_ms(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """``maybeRecordAndGetThrottleTimeMs``: record with the quota check; the throttle in ms, 0 if within quota
        or while no quota exists (then nothing is recorded). ``user`` is the raw principal name."""
        if not self._mask:
            return 0
        # the per-request hot path: sensor() inlined (cached quota-id, then the sensor, expiry check)
        qid = self._tags.get((user, client_id)) or self.quota_id(user, client_id)
        sensor = self._sensors.get(qid)
        if sensor is None or now_ms - sensor.last_record_ms > self.sensor_expiration_ms:
            sensor = self._replace_sensor(qid, sensor, now_ms)
        ms = sensor.record_and_throttle(value, now_ms, self._max_throttle_ms)
        return ms if -0x80000000 <= ms <= 0x7FFFFFFF else to_int32(ms)  # Kafka's throttleTime(...).toInt

    def record_no_throttle(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Record without a check (request network-thread time); only later decisions see it."""
        if self._mask:
            self.sensor(user, client_id, now_ms).record(value, now_ms)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """``unrecordQuotaSensor``: record ``-value`` unchecked (a throttled fetch's bytes)."""
        self.record_no_throttle(user, client_id, -value, now_ms)

    def room(self, user: str, client_id: str, now_ms: int) -> float | None:
        """What this user/client-id may record at ``now_ms`` without being throttled: ``bound × window − total``
        read without changing the sensor (``Rate.peek``); None while no finite quota applies or nothing was
        recorded yet (the window is empty: all of ``max_value_in_quota_window``)."""
        if not self._mask:
            return None
        sensor = self.existing_sensor(user, client_id)
        if not isinstance(sensor, RateSensor) or sensor.bound >= UNLIMITED:
            return None
        total, window = sensor.peek(now_ms)
        return sensor.bound * (window / 1000.0) - total

    def keeps_oversized(self, user: str, client_id: str, value: float, now_ms: int) -> bool:
        """Right after a throttled fetch of ``value`` bytes was recorded: whether it is delivered with its bytes
        kept (``quota_utils.keeps_oversized_fetch``, read from the very state the check read)."""
        sensor = self.existing_sensor(user, client_id)
        if not isinstance(sensor, RateSensor):
            return False
        total, window = sensor.reading(now_ms)
        return keeps_oversized_fetch(value, total, window, sensor.bound, self.samples, self.window_ms)

    def record_request_time_ns(self, user: str, client_id: str, thread_ns: int, now_ms: int) -> int:
        """Request quota, io-thread time: recorded with the check, throttle capped at one window."""
        if not self._mask:  # asked for every request: no further call while no request quota exists
            return 0
        return self.record_and_get_throttle_ms(user, client_id, thread_ns * NANOS_TO_PERCENT, now_ms)

    def record_network_time_ns(self, user: str, client_id: str, thread_ns: int, now_ms: int) -> None:
        """Request quota, network-thread time: recorded without the check."""
        self.record_no_throttle(user, client_id, thread_ns * NANOS_TO_PERCENT, now_ms)

    def record_exempt(self, percent: float, now_ms: int) -> None:
        """An exempt request's thread time goes to ``exempt-request-time`` (while quotas are enabled)."""
        if self.exempt is None:
            raise ValueError("exempt-request-time exists only on the REQUEST quota manager")
        if self._mask:
            self.exempt.record(percent, now_ms)

    def record_exempt_ns(self, thread_ns: int, now_ms: int) -> None:
        self.record_exempt(nanos_to_percent(thread_ns), now_ms)

    # -- reading ----------------------------------------------------------------------------------------------------
    def metric_value(self, user: str, client_id: str, now_ms: int) -> float | None:
        """The quota metric (rate, or tokens) of this user/client-id's quota-id; None without a sensor or quotas."""
        if not self._mask:
            return None
        sensor = self.existing_sensor(user, client_id)
        return None if sensor is None else sensor.measure(now_ms)

    def metric_window_ms(self, user: str, client_id: str, now_ms: int) -> int | None:
        """The rate window of the quota metric (None for token buckets or without a sensor)."""
        if not self._mask:
            return None
        sensor = self.existing_sensor(user, client_id)
        return None if sensor is None else sensor.window_size(now_ms)

    # -- throttling --------------------------------------------------------------------------------------------------
    def throttle(self, user: str, client_id: str, throttle_ms: int, now_ms: int) -> None:
        """The channel is muted for ``throttle_ms``: record ``throttle-time`` and enqueue it in the delay queue.

        The throttle-time sensor is created on first use (Kafka creates it with the quota sensor; it only ever
        holds non-zero throttles, so the readings are the same)."""
        if throttle_ms <= 0:
            return
        qid = self.quota_id(user, client_id)
        avg = self._throttle_sensors.get(qid)
        last = self._throttle_last_ms.get(qid)
        if avg is None or last is None or now_ms - last > self.sensor_expiration_ms:
            avg = self._throttle_sensors[qid] = Avg(self.metrics_samples, self.metrics_window_ms)
        avg.record(float(throttle_ms), now_ms)
        self._throttle_last_ms[qid] = now_ms
        self._throttled_until[qid] = max(self._throttled_until.get(qid, now_ms), now_ms + throttle_ms)
        heapq.heappush(self._delay_queue, now_ms + throttle_ms)
        self._queue_size.record(1.0)

    def expire_throttles(self, now_ms: int) -> int:
        """End the throttles whose time is up (the delay-queue reaper); returns how many ended."""
        ended = 0
        while self._delay_queue and self._delay_queue[0] <= now_ms:
            heapq.heappop(self._delay_queue)
            self._queue_size.record(-1.0)
            ended += 1
        return ended

    def delay_queue_size(self, now_ms: int) -> int:
        """Throttled channels still muted at ``now_ms``."""
        self.expire_throttles(now_ms)
        return len(self._delay_queue)

    def throttled_since(self, qid: QuotaId, since_ms: int) -> bool:
        """Whether a throttle of this quota-id ran at some time at or after ``since_ms`` (it is muted now, or was
        within the interval): its demand is more than its bound. Cluster-wide quotas read it (no recording)."""
        return self._throttled_until.get(qid, since_ms - 1) >= since_ms

    def throttle_time_avg(self, user: str, client_id: str, now_ms: int) -> float | None:
        avg = self._throttle_sensors.get(self.quota_id(user, client_id))
        return None if avg is None else avg.measure(now_ms)

    # -- controller mutations ---------------------------------------------------------------------------------------
    def new_controller_mutation_quota(self, user: str, client_id: str, strict: bool,
                                      now_ms: int) -> ControllerMutationQuota:
        """A per-request quota (strict or permissive); unbounded while no quota is configured."""
        if self.quota_type is not QuotaType.CONTROLLER_MUTATION:
            raise ValueError("controller-mutation quotas exist only on the CONTROLLER_MUTATION manager")
        if not self._mask:
            return UnboundedControllerMutationQuota()
        sensor = self.sensor(user, client_id, now_ms)
        assert isinstance(sensor, TokenBucketSensor)
        if strict:
            return StrictControllerMutationQuota(sensor)
        return PermissiveControllerMutationQuota(sensor)

    # -- metrics ------------------------------------------------------------------------------------------------------
    def metric_samples(self, now_ms: int) -> Iterator[MetricSample]:
        """Kafka-named metrics (docs/metrics.md). Reading purges expired samples, as a JMX read does."""
        qt = self.quota_type
        group = qt.group
        for qid, sensor in list(self._sensors.items()):
            yield MetricSample(qt.metric_name, group, qid.tags, sensor.measure(now_ms), qt.description)
            if isinstance(sensor, TokenBucketSensor):
                yield MetricSample("mutation-rate", group, qid.tags, sensor.mutation_rate.measure(now_ms),
                                   "Tracking mutation-rate per user/client-id")
        for qid, avg in list(self._throttle_sensors.items()):
            yield MetricSample("throttle-time", group, qid.tags, avg.measure(now_ms),
                               "Tracking average throttle-time per user/client-id")
        self.expire_throttles(now_ms)
        yield MetricSample("queue-size", group, (), self._queue_size.measure(), "Tracks the size of the delay queue")
        if self.exempt is not None:
            yield MetricSample("exempt-request-time", group, (), self.exempt.measure(now_ms),
                               "Tracking exempt-request-time utilization percentage")
