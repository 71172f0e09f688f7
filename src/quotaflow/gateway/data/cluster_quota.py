"""Cluster-wide quotas at the gateway (``quotaflow.quota.scope=cluster``): share usage through a topic, enforce
the local share with the unchanged engine.

Every window each gateway publishes the rate per quota-id of each of its participants (the engine managers of each
upstream broker, :mod:`quotaflow.gateway.data.broker_quotas`; produce, fetch and request quotas; and its connection
quotas' accepted-connection rate per client IP with a ``connection_creation_rate`` quota; the token-bucket
controller-mutation quota and the broker/listener ``max.connection.creation.rate`` stay local, as in
docs/cluster-quotas.md) to
``__quotaflow_usage`` in the cluster it fronts, and reads every other gateway's reports from the end of that topic.
Several times a window it turns the latest reports and its own rates into local shares
(:mod:`quotaflow.engine.cluster_share`) and sets them as the bounds of its quota sensors: the Kafka-exact engine
then throttles against the share instead of the whole quota. ``scope=broker`` (the default) changes nothing.

The Kafka client (kafka-python) runs on its own thread; the shares are computed and applied on the event loop,
where the engine lives. Freshness is judged by when a report arrived here, so clocks need not agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from quotaflow.core.errors import CommandError
from quotaflow.engine.cluster_share import (
    CONNECTIONS,
    DEFAULT_EXPIRY_WINDOWS,
    DEFAULT_FLOOR_FRACTION,
    IP_CONNECTION_RATE,
    PRESENCE,
    SHARED_TYPES,
    ShareTable,
    UsageKey,
    UsageReport,
    limit_decrease,
    participant_id,
    share_ip_connection_rates,
    smooth,
)
from quotaflow.engine.connection import GROUP as SOCKET_SERVER_GROUP
from quotaflow.engine.metrics import MetricSample
from quotaflow.engine.quota_type import QuotaType
from quotaflow.gateway.auth.hidden_topics import DEFAULT_USAGE_TOPIC, USAGE_TOPIC
from quotaflow.store.ratelog import RejectionLog
from quotaflow.store.signing import RecordSigner, ReplayGuard

if TYPE_CHECKING:
    from quotaflow.engine import QuotaManagers
    from quotaflow.engine.client_quota import ClientQuotaManager, QuotaId
    from quotaflow.engine.connection import ConnectionQuotas
    from quotaflow.engine.sensors import QuotaSensor
    from quotaflow.gateway.data.broker_quotas import BrokerQuotas
    from quotaflow.gateway.data.enforcement import Enforcement

Participants = Callable[[], Mapping[str, "Enforcement"]]  # broker -> its engine managers


def _metered(managers: QuotaManagers) -> Iterator[tuple[ClientQuotaManager, QuotaId, UsageKey, float, QuotaSensor]]:
    """Every quota-id with a configured limit and its sensor, over the shared quota types of one set of managers
    (a broker's live ones or its shadow's), with its manager and quota-id: what the usage table divides."""
    for quota_type in SHARED_TYPES:
        manager = managers.for_type(quota_type)
        if not manager.quotas_enabled:
            continue
        for qid, sensor in manager.quota_sensors():
            limit = manager.configured_limit(qid)
            if limit is not None:
                yield manager, qid, (quota_type, qid.user, qid.client_id), limit, sensor

log = logging.getLogger(__name__)

QUOTA_SCOPE: Final = "quotaflow.quota.scope"
FLOOR_FRACTION: Final = "quotaflow.quota.cluster.floor.fraction"
EXPIRY_WINDOWS: Final = "quotaflow.quota.cluster.expiry.windows"
BOOTSTRAP_SERVERS: Final = "quotaflow.quota.cluster.bootstrap.servers"
SIGNING_KEY_FILE: Final = "quotaflow.quota.cluster.signing.key.file"  # the store's file: one fleet key
BROKER_SCOPE: Final = "broker"
CLUSTER_SCOPE: Final = "cluster"
USAGE_RETENTION_MS: Final = 3_600_000  # reports are read from the end: an hour of history is plenty
APPLY_PER_WINDOW: Final = 4  # shares are re-applied a few times a window (new sensors, quota changes)
SETTLE_WINDOWS: Final = 2  # a report round: the peers' next reports, and their way here
_TYPES: Final = {t.name: t for t in (*SHARED_TYPES, IP_CONNECTION_RATE)}
MAX_WRITERS: Final = 10_000  # gateway ids remembered for replay checks before the stale ones are dropped


@dataclass(frozen=True, slots=True)
class ClusterQuotaSettings:
    """The ``quotaflow.quota.*`` settings of a gateway's ``--config`` file."""

    scope: str = BROKER_SCOPE
    usage_topic: str = DEFAULT_USAGE_TOPIC
    floor_fraction: float = DEFAULT_FLOOR_FRACTION
    expiry_windows: int = DEFAULT_EXPIRY_WINDOWS
    bootstrap_servers: str | None = None  # default: the gateway's upstream
    signing_key_file: str | None = None  # reports signed and verified with its keys (quotaflow.store.signing)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClusterQuotaSettings:
        scope = props.get(QUOTA_SCOPE, BROKER_SCOPE).strip().lower()
        if scope not in (BROKER_SCOPE, CLUSTER_SCOPE):
            raise CommandError(f"Invalid value {props[QUOTA_SCOPE]} for configuration {QUOTA_SCOPE}: "
                               f"String must be one of: {BROKER_SCOPE}, {CLUSTER_SCOPE}")
        floor = _number(props, FLOOR_FRACTION, DEFAULT_FLOOR_FRACTION, float)
        if not 0.0 <= floor <= 1.0:
            raise CommandError(f"Invalid value {floor} for configuration {FLOOR_FRACTION}: must be within [0, 1]")
        expiry = _number(props, EXPIRY_WINDOWS, DEFAULT_EXPIRY_WINDOWS, int)
        if expiry < 1:
            raise CommandError(f"Invalid value {expiry} for configuration {EXPIRY_WINDOWS}: Value must be at least 1")
        topic = props.get(USAGE_TOPIC, DEFAULT_USAGE_TOPIC).strip() or DEFAULT_USAGE_TOPIC
        return cls(scope, topic, floor, expiry, props.get(BOOTSTRAP_SERVERS) or None,
                   props.get(SIGNING_KEY_FILE, "").strip() or None)

    @property
    def cluster(self) -> bool:
        return self.scope == CLUSTER_SCOPE


def _number(props: Mapping[str, str], key: str, default: Any, kind: type) -> Any:
    if key not in props:
        return default
    try:
        return kind(props[key])
    except ValueError as e:
        raise CommandError(f"Invalid value {props[key]} for configuration {key}: Not a number of type "
                           f"{'DOUBLE' if kind is float else 'INT'}") from e


# -- wire format of a usage report ----------------------------------------------------------------------------


def encode_report(gateway: str, window_ms: int, participants: Mapping[str, Mapping[UsageKey, float]],
                  throttled: Mapping[str, Collection[UsageKey]] | None = None) -> bytes:
    """One record per gateway and window: every participant's (broker's, and ``connections`` for the per-IP
    connection rates) rates per quota-id, and the quota-ids each throttled within the rate window (a key of its
    own: a reader that does not know it still takes the rates)."""
    doc: dict[str, Any] = {
        "gateway": gateway, "window_ms": window_ms, "ts": time.time_ns() // 1_000_000,
        "participants": {broker: [[t.name, user, client, rate] for (t, user, client), rate in rates.items()]
                         for broker, rates in participants.items()}}
    if throttled:
        doc["throttled"] = {broker: [[t.name, user, client] for t, user, client in keys]
                            for broker, keys in throttled.items() if keys}
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_report(value: bytes, received_ms: int) -> list[UsageReport]:
    doc = json.loads(value)
    gateway = str(doc["gateway"])
    hot = dict(doc.get("throttled") or {})
    reports: list[UsageReport] = []
    for broker, rows in dict(doc["participants"]).items():
        rates: dict[UsageKey, float] = {}
        for type_name, user, client, rate in rows:
            quota_type = _TYPES.get(type_name)
            if quota_type is not None and isinstance(rate, int | float) and rate >= 0:
                rates[(quota_type, str(user), str(client))] = float(rate)
        throttled = frozenset(key for type_name, user, client in hot.get(broker, ())
                              if (key := (_TYPES.get(type_name), str(user), str(client))) in rates)
        reports.append(UsageReport(participant_id(gateway, str(broker)), received_ms, rates, throttled))
    return reports


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class UsageExchange:
    """The usage topic: publish this gateway's reports, collect everyone else's (kafka-python, own thread)."""

    def __init__(self, bootstrap: str, topic: str, signer: RecordSigner | None = None,
                 lookback_ms: int = 0) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.lookback_ms = lookback_ms  # read from this long before the end at start (the expiry)
        self._ends: dict[tuple[str, int], int] = {}  # the end offsets at start: what is before them is the lookback
        # with a signer, reports are signed, and only signed, fresh ones count: a writer of the topic without the
        # fleet key cannot shrink every gateway's share by reporting huge usage, nor replay a peer's old report
        self.signer = signer
        self._replays = ReplayGuard()
        self._latest: dict[bytes, int] = {}  # gateway id (the record key) -> the newest signed time taken from it
        self._rejections = RejectionLog(log, f"usage topic {topic}")
        self.rejected = 0
        self._lock = threading.Lock()
        self._inbox: list[UsageReport] = []
        self._stop = threading.Event()
        self._producer: Any = None
        self._consumer: Any = None
        self._thread: threading.Thread | None = None
        self.bad_reports = 0

    def start(self) -> None:
        """Blocking: create the topic if needed, connect, start reading at its end."""
        import kafka
        from kafka.admin import NewTopic
        from kafka.errors import KafkaError as ClientError
        from kafka.errors import TopicAlreadyExistsError

        servers = self.bootstrap.split(",")
        admin = kafka.KafkaAdminClient(bootstrap_servers=servers)
        try:
            for configs in ({"retention.ms": str(USAGE_RETENTION_MS)}, {}):
                try:
                    admin.create_topics([NewTopic(self.topic, 1, 1, topic_configs=configs)])
                    break
                except TopicAlreadyExistsError:
                    break
                except ClientError as e:
                    if not configs:
                        raise
                    log.info("usage topic %s: the broker refused %s (%s); using its defaults", self.topic, configs, e)
        finally:
            admin.close()
        # a lost or repeated report costs nothing (the next window's replaces it): acks=1, no idempotence
        self._producer = kafka.KafkaProducer(bootstrap_servers=servers, acks=1, linger_ms=0,
                                             enable_idempotence=False)
        self._consumer = kafka.KafkaConsumer(bootstrap_servers=servers, group_id=None, enable_auto_commit=False,
                                             fetch_max_wait_ms=100)
        partitions = [kafka.TopicPartition(self.topic, p)
                      for p in sorted(self._consumer.partitions_for_topic(self.topic) or {0})]
        self._consumer.assign(partitions)
        self._consumer.seek_to_end(*partitions)
        self._ends = {(tp.topic, tp.partition): self._consumer.position(tp) for tp in partitions}
        # the reports of the last expiry: a gateway that starts knows its live peers at once (else it is alone for
        # a window, and a client that comes now gets all of Q there while the peers give theirs theirs)
        since = time.time_ns() // 1_000_000 - self.lookback_ms
        for tp, found in (self._consumer.offsets_for_times({tp: since for tp in partitions}) or {}).items():
            if found is not None:
                self._consumer.seek(tp, found.offset)
        self._thread = threading.Thread(target=self._run, name="quotaflow-usage", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                batches = self._consumer.poll(timeout_ms=100)
            except Exception as e:
                if self._stop.is_set():
                    return
                log.warning("usage topic %s: %s", self.topic, e)
                self._stop.wait(1.0)
                continue
            received, wall = _now_ms(), time.time_ns() // 1_000_000
            reports: list[UsageReport] = []
            for records in batches.values():
                for record in records:
                    # a report of the lookback at start is as old as its timestamp says (the writer's clock: at
                    # most the expiry); later ones are judged by when they arrive, so clocks need not agree
                    end = self._ends.get((record.topic, record.partition), 0)
                    age = min(max(0, wall - record.timestamp), self.lookback_ms) if record.offset < end else 0
                    error = self._check(record.key, record.value, record.headers)
                    if error is not None:
                        self.rejected += 1
                        self._rejections.skipped(record.offset, error)
                        continue
                    try:
                        reports.extend(decode_report(record.value, received - age))
                    except (ValueError, TypeError, KeyError) as e:
                        self.bad_reports += 1
                        log.debug("usage topic %s: skipped a report at offset %d: %s", self.topic, record.offset, e)
            if reports:
                with self._lock:
                    self._inbox.extend(reports)

    def take(self) -> list[UsageReport]:
        with self._lock:
            reports, self._inbox = self._inbox, []
        return reports

    def _check(self, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
               ) -> str | None:
        """Why a report must not count (unsigned, badly signed, replayed), None when it may. Reader thread."""
        if self.signer is None:
            return None
        verified = self.signer.verify(self.topic, key, value, headers)
        if verified.ts_ms is None:
            return verified.error
        writer = key or b""
        if verified.ts_ms <= self._latest.get(writer, -1):
            return f"replayed report of {writer.decode(errors='replace')!r}"
        error = self._replays.admit(verified.ts_ms)
        if error is None:
            self._latest[writer] = verified.ts_ms
            if len(self._latest) > MAX_WRITERS:  # gateways that restarted long ago
                horizon = self._replays.newest_ms - self._replays.window_ms
                self._latest = {w: ts for w, ts in self._latest.items() if ts >= horizon}
        return error

    def publish(self, gateway: str, value: bytes) -> None:
        key = gateway.encode()
        headers = None
        if self.signer is not None:
            headers = self.signer.sign(self.topic, key, value, self._replays.stamp(time.time_ns() // 1_000_000))
        self._producer.send(self.topic, key=key, value=value, headers=headers)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for client in (self._producer, self._consumer):
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()


class ClusterQuotas:
    """Applies cluster-wide shares to one gateway's engine."""

    def __init__(self, settings: ClusterQuotaSettings, participants: Participants, bootstrap: str,
                 window_ms: int, gateway_id: str | None = None,
                 connections: ConnectionQuotas | None = None) -> None:
        self.settings = settings
        self.participants = participants
        self.connections = connections  # the gateway's KIP-612 quotas: per-IP creation rates are shared too
        self.window_ms = window_ms
        self.gateway_id = gateway_id or uuid.uuid4().hex[:16]
        self.table = ShareTable(self.gateway_id, window_ms, settings.expiry_windows, settings.floor_fraction)
        signer = RecordSigner.from_file(settings.signing_key_file) if settings.signing_key_file else None
        if signer is None:
            log.warning("usage topic %s: reports are not signed (%s is not set): anyone who can write the topic "
                        "can change every gateway's share of its quotas", settings.usage_topic, SIGNING_KEY_FILE)
        self.exchange = UsageExchange(settings.bootstrap_servers or bootstrap, settings.usage_topic, signer,
                                      settings.expiry_windows * window_ms)
        self.shares: dict[str, dict[UsageKey, float]] = {}  # broker -> quota-id -> local bound
        # this gateway's rates as last published: shares divide by what everyone published, its own included, so
        # every gateway divides the same numbers and the shares add up to Q once the reports have propagated
        self.published: dict[str, dict[UsageKey, float]] = {}
        self.published_throttled: dict[str, frozenset[UsageKey]] = {}  # and the quota-ids it published throttled
        self._throttled: dict[str, frozenset[UsageKey]] = {}  # throttled within the rate window, as last applied
        self._next_publish_ms = 0
        self._metered_since: dict[tuple[str, UsageKey], int] = {}  # (broker, quota-id) -> first metered here
        self.live_participants = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.exchange.start)
        self.apply(_now_ms())
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await asyncio.get_running_loop().run_in_executor(None, self.exchange.close)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.window_ms / APPLY_PER_WINDOW / 1000)
            value = self.step(_now_ms())
            if value is not None:
                try:
                    await loop.run_in_executor(None, self.exchange.publish, self.gateway_id, value)
                except Exception as e:  # the broker is away: keep enforcing with what we know
                    log.warning("cannot publish usage to %s: %s", self.settings.usage_topic, e)

    def step(self, now_ms: int, engine_now_ms: int | None = None) -> bytes | None:
        """One turn of the share loop: :meth:`apply`, and once a window the report to publish (this gateway's
        rates, smoothed), None between. Pure apart from the engine it bounds: the loop and the fleet tests drive
        it with their clocks."""
        own = self.apply(now_ms, engine_now_ms)
        if now_ms < self._next_publish_ms:
            return None
        self._next_publish_ms = now_ms + self.window_ms
        self.published = {broker: smooth(self.published.get(broker, {}), rates) for broker, rates in own.items()}
        self.published_throttled = dict(self._throttled)
        # PRESENCE: peers count this gateway among the live ones before it meters anything (its first client's
        # share is then Q over the gateways, not Q)
        return encode_report(self.gateway_id, self.window_ms, {PRESENCE: {}, **self.published},
                             self.published_throttled)

    def apply(self, now_ms: int, engine_now_ms: int | None = None) -> dict[str, dict[UsageKey, float]]:
        """Take the reports that arrived, compute every participant's share of every quota-id (from the rates
        published last, everyone's) and set it as the bound of that quota-id's sensor; returns this gateway's
        current rates per participant (what it publishes next). ``now_ms`` is the clock reports are judged by,
        ``engine_now_ms`` the engine's (default: wall time, as the gateway records with)."""
        for report in self.exchange.take():
            self.table.receive(report)
        self.table.expire(now_ms)
        engine_now = time.time_ns() // 1_000_000 if engine_now_ms is None else engine_now_ms
        quotas: dict[UsageKey, float] = {}
        own: dict[str, dict[UsageKey, float]] = {}
        sensors: dict[tuple[str, UsageKey], QuotaSensor] = {}
        throttled: dict[str, frozenset[UsageKey]] = {}
        gateways = self.table.live_gateways(now_ms)
        for broker, enforcement in self.participants().items():
            rates = own[broker] = {}
            hot: set[UsageKey] = set()
            for quota_type in SHARED_TYPES:  # a sensor made before the next turn: Q over the gateways
                enforcement.managers.for_type(quota_type).new_sensor_divisor = gateways
            for manager, qid, key, limit, sensor in _metered(enforcement.managers):
                quotas[key] = limit
                rates[key] = max(0.0, sensor.measure(engine_now))
                sensors[(broker, key)] = sensor
                if manager.throttled_since(qid, engine_now - manager.samples * manager.window_ms):  # its window
                    hot.add(key)
            throttled[broker] = frozenset(hot)
        self._throttled = throttled
        self._metered_since = {(broker, key): self._metered_since.get((broker, key), now_ms)
                               for broker, rates in own.items() for key in rates}
        divided = {broker: {key: self._divided_rate(broker, key, now_ms) for key in rates}
                   for broker, rates in own.items()}
        targets = self.table.shares(quotas, divided, now_ms, self.published_throttled)
        self.live_participants = len(own) + sum(1 for p in self.table.live_peers(now_ms)
                                                if not p.participant.endswith(("/" + CONNECTIONS, "/" + PRESENCE)))
        self.shares = {}
        if self.connections is not None:
            own[CONNECTIONS], self.shares[CONNECTIONS] = share_ip_connection_rates(
                self.table, self.connections, self.gateway_id, self.published.get(CONNECTIONS, {}), now_ms,
                engine_now)
            shadow = getattr(self.connections, "shadow", None)  # a shadow set's: bounded the same way, not published
            if shadow is not None:
                share_ip_connection_rates(self.table, shadow, self.gateway_id, self.published.get(CONNECTIONS, {}),
                                          now_ms, engine_now)
        for broker, shares in targets.items():
            applied = self.shares[broker] = {}
            for key, target in shares.items():
                sensor = sensors[(broker, key)]
                bound = applied[key] = limit_decrease(target, sensor.bound, own[broker][key])
                if sensor.bound != bound:
                    sensor.set_bound(bound)
        self._share_shadow(now_ms, engine_now)
        return own

    def _divided_rate(self, broker: str, key: UsageKey, now_ms: int) -> float | None:
        """The rate a participant's share of a quota-id is divided by: its published one, None (demand unknown:
        ``Q`` over every live participant) while it has published none or has metered the quota-id for less than
        ``SETTLE_WINDOWS``: peers that started it at the same moment have not reported it yet, and each would
        take all of ``Q`` meanwhile."""
        since = self._metered_since.get((broker, key), now_ms)
        if now_ms - since < SETTLE_WINDOWS * self.window_ms:
            return None
        return self.published.get(broker, {}).get(key)

    def _share_shadow(self, now_ms: int, engine_now_ms: int) -> None:
        """A running shadow set's sensors get the same treatment as the live ones: each shadow quota-id's local
        share of the shadow's cluster-wide value, from the same published usage (the shadow meets the same
        traffic), the same table and the same decrease limit. A quota-id the live quotas do not meter has no
        usage published by the peers: it is divided among this gateway's participants only (docs/gateway.md)."""
        quotas: dict[UsageKey, float] = {}
        divided: dict[str, dict[UsageKey, float | None]] = {}
        sensors: dict[tuple[str, UsageKey], QuotaSensor] = {}
        for broker, enforcement in self.participants().items():
            shadow = enforcement.shadow
            if shadow is None:
                continue
            wanted = divided[broker] = {}
            for _manager, _qid, key, limit, sensor in _metered(shadow.managers):
                quotas[key] = limit
                wanted[key] = self._divided_rate(broker, key, now_ms)
                sensors[(broker, key)] = sensor
        if not divided:
            return
        for broker, shares in self.table.shares(quotas, divided, now_ms, self.published_throttled).items():
            for key, target in shares.items():
                sensor = sensors[(broker, key)]
                bound = limit_decrease(target, sensor.bound, max(0.0, sensor.measure(engine_now_ms)))
                if sensor.bound != bound:
                    sensor.set_bound(bound)

    def metric_samples(self, now_ms: int) -> Iterator[MetricSample]:
        """``cluster-share`` per quota-id (``kafka_server_produce_cluster_share{user,client_id}``: the local
        bound the engine enforces) and ``live-participants`` (``kafka_server_cluster_quota_live_participants``)."""
        for broker, shares in list(self.shares.items()):
            for (quota_type, user, client_id), share in shares.items():
                if quota_type is IP_CONNECTION_RATE:
                    yield MetricSample("ip-connection-cluster-share", SOCKET_SERVER_GROUP, (("ip", user),), share,
                                       "This gateway's share of the cluster-wide connection creation rate per IP")
                    continue
                assert isinstance(quota_type, QuotaType)
                yield MetricSample("cluster-share", quota_type.group,
                                   (("broker", broker), ("user", user), ("client-id", client_id)), share,
                                   "This gateway's share of the cluster-wide quota per user/client-id")
        yield MetricSample("live-participants", "ClusterQuota", (), float(self.live_participants),
                           "Participants (engine managers per gateway and broker, this gateway's included) whose "
                           "usage is fresh")
        yield MetricSample("rejected-reports", "ClusterQuota", (), float(self.exchange.rejected),
                           "Usage reports refused: unsigned, badly signed or replayed")


def cluster_quotas_for(props: Mapping[str, str], broker_quotas: BrokerQuotas, upstreams: Sequence[tuple[str, int]],
                       window_seconds: int, name: str,
                       connections: ConnectionQuotas | None = None) -> ClusterQuotas | None:
    """The cluster-quota component a gateway's settings ask for (None with the default ``scope=broker``)."""
    settings = ClusterQuotaSettings.from_properties(props)
    if not settings.cluster:
        return None
    bootstrap = ",".join(f"{host}:{port}" for host, port in upstreams)
    gateway_id = f"{name}-{uuid.uuid4().hex[:12]}"
    return ClusterQuotas(settings, lambda: broker_quotas.brokers, bootstrap, window_seconds * 1000, gateway_id,
                         connections)


__all__ = ["QUOTA_SCOPE", "ClusterQuotaSettings", "ClusterQuotas", "cluster_quotas_for"]
