"""The quota store in the Kafka cluster itself: ``--store kafka://HOST:PORT[,HOST:PORT...][/TOPIC]``.

One single-partition topic (default ``__quotaflow_quotas``, created with ``cleanup.policy=compact`` where the
broker accepts it) is the store; :mod:`quotaflow.store.records` defines its records and the view built from them.
Each entity of an AlterClientQuotas request is one record of validated operations, so concurrent writers through
different gateways lose no operation and every entity stays all-or-nothing; the change log's ``seq`` is the
record's offset + 1.

Every reader keeps the view current by consuming the topic on a background thread (describe, resolve, credential
checks and the gateway's change polling read it, never the broker); opening the store first catches up to the end
offset, so a CLI command or a restarted gateway starts from every committed record, and a write returns once this
store's own view has applied it (read-your-writes).

Client settings follow Kafka's client property names (``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config``, ``ssl.ca.location``...), as URL query parameters or in a properties file named by
``config=FILE``: ``kafka://b1:9093/__quotaflow_quotas?config=/etc/quotaflow/store.properties``.

``quotaflow.store.signing.key.file=FILE`` (a query parameter or in that file) signs every record written and
applies only records signed with one of the file's keys, each at the offset it was signed for
(:mod:`quotaflow.store.signing`, :mod:`quotaflow.store.records`): without it, anyone who can write the topic can
write quotas, credentials and ACLs; with it, nobody without the key can, and nobody can replay a record.

Writers add a checkpoint (the state in chunk records, then a manifest) whenever the log has grown enough since the
last; a command opens the store ``from_checkpoint`` and reads the newest one and the records after it instead of
the whole log (gateways read the whole log: their change log starts at 0).
"""

from __future__ import annotations

import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from quotaflow.core.acl import AclBinding
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.errors import QuotaflowError, ShadowStateError, StoreError
from quotaflow.core.properties import parse_properties
from quotaflow.engine.metrics import MetricSample
from quotaflow.store.base import (
    AclChange,
    AclSnapshot,
    AclStore,
    Change,
    Credential,
    EntityChange,
    Promotion,
    QuotaStore,
    ScramCredential,
    ScramStore,
    ShadowSet,
    ShadowStore,
    Snapshot,
    Values,
)
from quotaflow.store.records import (
    MANIFEST_KEY,
    MAX_RECORD_BYTES,
    Manifest,
    StoreView,
    acl_record,
    credential_record,
    credential_tombstones,
    quota_record,
    record_size,
    scram_record,
    scram_tombstone,
    shadow_record,
)
from quotaflow.store.shadowing import PROMOTE, ROLLBACK, check_rollback, effective, rollback_target
from quotaflow.store.signing import RecordSigner

log = logging.getLogger(__name__)

DEFAULT_TOPIC: Final = "__quotaflow_quotas"
DEFAULT_TIMEOUT_MS: Final = 30_000
FETCH_MAX_WAIT_MS: Final = 100  # how stale a reader's view can get, plus one poll: well inside the 2 s promise
POLL_MS: Final = 100
NOTICE_AFTER_S: Final = 0.5  # a CLI says what it is connecting to once opening takes longer than this
CHECKPOINT_INTERVAL: Final = 10_000  # records written since the newest checkpoint before a writer adds one
SCAN_RECORDS: Final = 256  # the first window read back from the end looking for a checkpoint (then doubled)
PLACEMENT_ATTEMPTS: Final = 20  # a signed write re-signed this often for a later offset before giving up
_JAAS_OPTION: Final = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')

# Kafka client property -> kafka-python keyword (librdkafka's spelling accepted too where it differs)
_CLIENT_PROPERTIES: Final[dict[str, str]] = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.truststore.location": "ssl_cafile",  # PEM truststores (Kafka 2.7+, KIP-651)
    "ssl.certificate.location": "ssl_certfile",
    "ssl.keystore.location": "ssl_certfile",  # PEM keystores (KIP-651)
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "client.id": "client_id",
}
SIGNING_KEY_FILE: Final = "quotaflow.store.signing.key.file"
_STORE_PROPERTIES: Final = frozenset({"sasl.jaas.config", "ssl.endpoint.identification.algorithm",
                                      "request.timeout.ms", "replication.factor", "config", SIGNING_KEY_FILE})


@dataclass(frozen=True, slots=True)
class KafkaStoreSpec:
    """A parsed ``kafka://`` store URL: bootstrap servers, topic, client settings (kafka-python keywords)."""

    bootstrap: tuple[str, ...]
    topic: str = DEFAULT_TOPIC
    client: Mapping[str, Any] = field(default_factory=dict)
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    replication_factor: int = 1
    signing_key_file: str | None = None  # quotaflow.store.signing.key.file

    def __str__(self) -> str:  # never the query string: it may carry credentials
        return f"kafka://{','.join(self.bootstrap)}/{self.topic}"

    @classmethod
    def parse(cls, url: str) -> KafkaStoreSpec:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme.lower() != "kafka" or not url[len(parts.scheme) + 1:].startswith("//"):
            raise StoreError(f"invalid Kafka store URL {url!r}: expected kafka://HOST:PORT[,HOST:PORT...][/TOPIC]")
        servers = tuple(s.strip() for s in parts.netloc.split(",") if s.strip())
        if not servers:
            raise StoreError(f"invalid Kafka store URL {url!r}: no bootstrap server")
        for server in servers:
            host, sep, port = server.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise StoreError(f"invalid Kafka store URL {url!r}: {server!r} is not HOST:PORT")
        topic = parts.path.strip("/") or DEFAULT_TOPIC
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic) or topic in (".", ".."):
            raise StoreError(f"invalid Kafka store URL {url!r}: {topic!r} is not a legal topic name")
        props: dict[str, str] = {}
        query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
        if "config" in query:
            try:
                props.update(parse_properties(Path(query["config"]).read_text()))
            except OSError as e:
                raise StoreError(f"cannot read the Kafka store's client config {query['config']}: {e.strerror}") from e
        props.update(query)
        return cls(servers, topic, *_client_settings(props), signing_key_file=props.get(SIGNING_KEY_FILE) or None)


def _client_settings(props: Mapping[str, str]) -> tuple[dict[str, Any], int, int]:
    client: dict[str, Any] = {}
    timeout_ms, replication = DEFAULT_TIMEOUT_MS, 1
    for key, value in props.items():
        if key in _CLIENT_PROPERTIES:
            client[_CLIENT_PROPERTIES[key]] = value.upper() if key in ("security.protocol", "sasl.mechanism",
                                                                        "sasl.mechanisms") else value
        elif key == "sasl.jaas.config":
            options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(value)}
            if "username" in options:
                client["sasl_plain_username"] = options["username"]
            if "password" in options:
                client["sasl_plain_password"] = options["password"]
        elif key == "ssl.endpoint.identification.algorithm":
            client["ssl_check_hostname"] = value.strip().lower() == "https"
        elif key in ("request.timeout.ms", "replication.factor"):
            try:
                number = int(value)
            except ValueError as e:
                raise StoreError(f"Kafka store setting {key}={value!r} is not an integer") from e
            if key == "request.timeout.ms":
                timeout_ms = max(1, number)
            else:
                replication = number
        elif key not in _STORE_PROPERTIES:
            raise StoreError(f"unknown Kafka store setting {key!r} (supported: "
                             f"{', '.join(sorted({*_CLIENT_PROPERTIES, *_STORE_PROPERTIES}))})")
    return client, timeout_ms, replication


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- the store ------------------------------------------------------------------------------------------------


class KafkaStore:
    """:class:`~quotaflow.store.base.QuotaStore` over one compacted single-partition topic. Thread-safe."""

    def __init__(self, spec: KafkaStoreSpec | str, *, clock_ms: Callable[[], int] = _now_ms,
                 notice: Callable[[str], None] | None = None, from_checkpoint: bool = False) -> None:
        """Connect and catch up. ``notice`` (a CLI's stderr) is told what is being tried when that takes longer
        than ``NOTICE_AFTER_S``, so an unreachable cluster is never a silent wait. ``from_checkpoint`` (a CLI
        command) starts from the newest checkpoint near the end of the log instead of offset 0: the same state,
        read from a few chunk records and the tail, and a change log that starts there."""
        self.spec = KafkaStoreSpec.parse(spec) if isinstance(spec, str) else spec
        self.path = str(self.spec)  # for messages, like SqliteStore.path
        self._clock_ms = clock_ms
        self._cond = threading.Condition()
        key_file = self.spec.signing_key_file
        self.signer = RecordSigner.from_file(key_file) if key_file else None
        self._view = StoreView(str(self.spec), signer=self.signer, topic=self.spec.topic)  # guarded by _cond
        self._error: str | None = None
        self._from_checkpoint = from_checkpoint
        self._scanned = 0  # records read while looking for a checkpoint
        self._loaded = 0  # of the view's records_read, those already in _scanned
        self._write_lock = threading.Lock()  # one append at a time per process: they would race for offsets
        self._next_offset = 0  # right after this store's own last write (guarded by _write_lock)
        self._stop = threading.Event()
        self._timeout_s = self.spec.timeout_ms / 1000
        self._producer: Any = None
        self._consumer: Any = None
        timer = None
        if notice is not None:
            timer = threading.Timer(NOTICE_AFTER_S, notice, args=[
                f"Connecting to the quota store {self.spec} (bootstrap {','.join(self.spec.bootstrap)}); waiting up "
                f"to {self._timeout_s:g} s (request.timeout.ms={self.spec.timeout_ms})..."])
            timer.daemon = True
            timer.start()
        try:
            try:
                self._connect()
            except BaseException:
                self.close()
                raise
            self._thread = threading.Thread(target=self._run, name=f"quotaflow-store-{self.spec.topic}",
                                            daemon=True)
            self._thread.start()
            try:
                self._wait_for(self._end_offset, "catch up with")
            except BaseException:
                self.close()
                raise
        finally:
            if timer is not None:
                timer.cancel()

    # -- connection --------------------------------------------------------------------------------------

    def _connect(self) -> None:
        import kafka
        from kafka.errors import KafkaError as ClientError

        common = {"bootstrap_servers": list(self.spec.bootstrap), "request_timeout_ms": self.spec.timeout_ms,
                  "bootstrap_timeout_ms": self.spec.timeout_ms, **self.spec.client}
        try:
            self._ensure_topic(common)
            # idempotent: a retried send must not land twice (a duplicate of an old operation, after another
            # writer's, would undo that writer's acknowledged change)
            self._producer = kafka.KafkaProducer(acks="all", linger_ms=0, retries=5, enable_idempotence=True,
                                                 max_in_flight_requests_per_connection=1, **common)
            self._consumer = kafka.KafkaConsumer(group_id=None, enable_auto_commit=False,
                                                 fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
                                                 auto_offset_reset="earliest", **common)
            self._tp = kafka.TopicPartition(self.spec.topic, 0)
            self._consumer.assign([self._tp])
            self._consumer.seek_to_beginning(self._tp)
            self._end_offset = int(self._consumer.end_offsets([self._tp])[self._tp])
            if self._from_checkpoint:
                self._load_checkpoint()
        except ClientError as e:
            if _unreachable(e):
                raise StoreError(f"quota store {self}: no broker reachable at {','.join(self.spec.bootstrap)} "
                                 f"within {self._timeout_s:g} s (request.timeout.ms={self.spec.timeout_ms}, "
                                 f"the store URL's setting that bounds the wait)") from e
            raise StoreError(f"quota store {self}: {_client_reason(e)}") from e

    def _ensure_topic(self, common: Mapping[str, Any]) -> None:
        """Create the topic (one partition, compacted where the broker allows it) unless it exists; refuse a
        topic with more than one partition (records must have one total order)."""
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic
        from kafka.errors import KafkaError as ClientError
        from kafka.errors import TopicAlreadyExistsError

        admin = KafkaAdminClient(**common)
        try:
            for configs in ({"cleanup.policy": "compact"}, {}):
                topic = NewTopic(self.spec.topic, 1, self.spec.replication_factor, topic_configs=configs)
                try:
                    admin.create_topics([topic])
                    log.info("created quota store topic %s (%s)", self.spec.topic, configs or "broker defaults")
                    break
                except TopicAlreadyExistsError:
                    break
                except ClientError as e:
                    if not configs:
                        raise
                    log.warning("the broker refused a compacted %s (%s); creating it with its defaults",
                                self.spec.topic, _client_reason(e))
            described = admin.describe_topics([self.spec.topic])
            partitions = len(described[0].get("partitions") or []) if described else 0
            if partitions != 1:
                raise StoreError(f"quota store {self}: topic {self.spec.topic} has {partitions} partitions; the "
                                 f"store needs exactly one (one order for every reader)")
        finally:
            admin.close()

    def __str__(self) -> str:
        return str(self.spec)

    # -- checkpoints -----------------------------------------------------------------------------------------

    def _load_checkpoint(self) -> None:
        """Find the newest checkpoint, reading back from the end in doubling windows (``SCAN_RECORDS`` first;
        writers add one whenever the log has grown enough since the last, so it is near the end); load its chunks
        (each verified at its offset, as every record is), apply what follows it and continue from the end.
        Without a usable one, what was read back is the whole log, applied from offset 0: never read twice."""
        end = self._end_offset
        if end <= CHECKPOINT_INTERVAL:
            return  # reading it all costs no more than looking for a checkpoint
        found: dict[int, Any] = {}
        lo, window, tried = end, SCAN_RECORDS, set()
        view: StoreView | None = None
        while lo > 0 and view is None:
            hi, lo = lo, max(0, lo - window)
            window *= 2
            found.update(self._read_range(lo, hi))
            for offset in sorted((o for o, r in found.items() if r.key == MANIFEST_KEY and o not in tried),
                                 reverse=True):
                tried.add(offset)
                view = self._from_manifest(found[offset], found, lo)
                if view is not None:
                    log.debug("quota store %s: starting from the checkpoint at offset %d (position %d)", self,
                              offset, view.position)
                    break
        if view is None:
            view = self._view
        elif view.position < lo:
            found.update(self._read_range(view.position, lo))
        for at in sorted(o for o in found if o >= view.position):
            record = found[at]
            view.apply(at, record.key, record.value, record.headers)
        view.advance(end)
        self._view, self._loaded = view, view.records_read  # counted in _scanned already
        self._consumer.seek(self._tp, end)

    def _from_manifest(self, record: Any, found: dict[int, Any], lo: int) -> StoreView | None:
        """A view loaded from the checkpoint ``record`` names (reading its chunks below ``lo`` into ``found``),
        or None (logged) when it does not verify or a chunk is gone."""
        try:
            if (problem := self._view.placement_problem(record.offset, record.key, record.value,
                                                        record.headers)) is not None:
                raise ValueError(problem)
            manifest = Manifest.decode(record.value)
            if manifest.position > record.offset or max(manifest.chunks) >= record.offset:
                raise ValueError("a manifest naming records after itself")
            if min(manifest.chunks) < lo:
                found.update(self._read_range(min(manifest.chunks), lo))
            chunks = []
            for offset in manifest.chunks:
                chunk = found.get(offset)
                if chunk is None or not chunk.key or not chunk.key.startswith(b'["checkpoint-chunk"'):
                    raise ValueError(f"its chunk at offset {offset} is gone")
                if (problem := self._view.placement_problem(offset, chunk.key, chunk.value,
                                                            chunk.headers)) is not None:
                    raise ValueError(f"its chunk at offset {offset}: {problem}")
                chunks.append(chunk.value)
            view = StoreView(str(self.spec), signer=self.signer, topic=self.spec.topic)
            view.load_checkpoint(manifest, chunks)
            return view
        except (ValueError, TypeError, KeyError, IndexError, QuotaflowError) as e:
            log.warning("quota store %s: the checkpoint at offset %d is not usable (%s)", self, record.offset, e)
            return None

    def _read_range(self, lo: int, hi: int) -> dict[int, Any]:
        """The records at offsets ``[lo, hi)`` (before the background reader starts: the consumer is ours)."""
        self._consumer.seek(self._tp, lo)
        out: dict[int, Any] = {}
        deadline = time.monotonic() + self._timeout_s
        while (position := int(self._consumer.position(self._tp))) < hi:
            if time.monotonic() > deadline:
                raise StoreError(f"quota store {self}: could not read offsets {lo}..{hi} within "
                                 f"{self._timeout_s:g} s")
            # never past hi: what lies there was read already (a later window) or is the background reader's
            for records in self._consumer.poll(timeout_ms=POLL_MS, max_records=hi - position).values():
                for record in records:
                    self._scanned += 1
                    if lo <= record.offset < hi:
                        out[record.offset] = record
        return out

    def _maybe_checkpoint(self) -> None:
        """Once the log has grown by ``CHECKPOINT_INTERVAL`` records and by half the state's size since the newest
        checkpoint, write one: the chunks, then the manifest naming their offsets (both signed at their offsets like
        every record). A checkpoint holds about as much as the state's records, so checkpoints add at most about
        twice what the records written hold, and a reader starting from one reads the state and at most that
        much tail. A
        crash between the two leaves chunks no manifest names, which readers ignore. Caller holds _write_lock."""
        with self._cond:  # readers (the gateway's loop) wait for this lock: copy, encode outside it
            view = self._view
            live = (len(view.entities) + len(view.credentials) + len(view.scram) + len(view.acls)
                    + len(view.shadows) + len(view.promotions))
            if view.position - view.checkpoint_at <= max(CHECKPOINT_INTERVAL, live // 2):
                return
            state = view.state()
            position, acl_version, shadow_version = view.position, view.acl_version, view.shadow_version
        offsets = self._write(state.chunks())
        manifest = Manifest(position, acl_version, tuple(offsets), shadow_version)
        self._wait_for(self._write([manifest.record()])[0] + 1, "apply")

    @property
    def records_read(self) -> int:
        """Records this store has read from the topic (looking for a checkpoint included) since it was opened."""
        with self._cond:
            return self._scanned + self._view.records_read - self._loaded

    # -- the view ---------------------------------------------------------------------------------------

    def _run(self) -> None:
        from kafka.errors import KafkaError as ClientError

        backoff = 0.1
        while not self._stop.is_set():
            try:
                batches = self._consumer.poll(timeout_ms=POLL_MS)
                position = int(self._consumer.position(self._tp))
            except ClientError as e:
                with self._cond:
                    self._error = _client_reason(e)
                log.warning("quota store %s: %s (retrying in %.1f s)", self, self._error, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            except Exception:  # the consumer was closed under us by close()
                if self._stop.is_set():
                    return
                raise
            backoff = 0.1
            with self._cond:
                self._error = None
                for records in batches.values():
                    for record in records:
                        self._view.apply(record.offset, record.key, record.value, record.headers)
                self._view.advance(position)
                self._cond.notify_all()

    def _wait_for(self, offset: int, what: str) -> None:
        """Block until the view holds every record below ``offset``."""
        deadline = time.monotonic() + self._timeout_s
        with self._cond:
            while self._view.position < offset:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    reason = f": {self._error}" if self._error else ""
                    raise StoreError(f"quota store {self}: could not {what} offset {offset} within "
                                     f"{self._timeout_s:g} s (at {self._view.position}){reason}")
                self._cond.wait(min(remaining, 0.5))

    def _append(self, records: Sequence[tuple[bytes, bytes | None]]) -> list[int]:
        """Produce ``records`` to the one partition in order, wait until this store's view has applied them; their
        offsets.

        Signed, each record is valid only at the offset it was signed for (:mod:`quotaflow.store.records`). The
        offset is predicted from what this store has read (its view's position, or right after its own last
        write); another writer's record landing first shifts ours, so what landed elsewhere (and is therefore
        refused by every reader) is signed again for the offset after the last one acknowledged and re-sent,
        until every record sits where it was signed for (bounded by ``PLACEMENT_ATTEMPTS``)."""
        with self._write_lock:
            offsets = self._write(records)
            self._wait_for(max(offsets) + 1, "apply")
            try:
                self._maybe_checkpoint()
            except StoreError as e:  # the write itself stands; the next one tries the checkpoint again
                log.warning("%s (writing a checkpoint)", e)
        return offsets

    def _write(self, records: Sequence[tuple[bytes, bytes | None]]) -> list[int]:
        from kafka.errors import KafkaError as ClientError

        try:
            if self.signer is None:
                return self._send([(k, v, None) for k, v in records])
            return self._send_placed(records)
        except ClientError as e:
            raise StoreError(f"quota store {self}: cannot write: {_client_reason(e)}") from e

    def _send(self, records: Sequence[tuple[bytes, bytes | None, list[tuple[str, bytes]] | None]]) -> list[int]:
        futures = [self._producer.send(self.spec.topic, key=k, value=v, partition=0, headers=h)
                   for k, v, h in records]
        self._producer.flush(timeout=self._timeout_s)
        return [int(f.get(timeout=self._timeout_s).offset) for f in futures]

    def _send_placed(self, records: Sequence[tuple[bytes, bytes | None]]) -> list[int]:
        assert self.signer is not None
        placed: list[int] = []
        pending = list(records)
        with self._cond:
            at = max(self._view.position, self._next_offset)
        for _attempt in range(PLACEMENT_ATTEMPTS):
            with self._cond:
                ts = max(self._clock_ms(), self._view.newest_ms + 1)
            signed = [(k, v, self.signer.sign(self.spec.topic, k, v, ts, at + i)) for i, (k, v) in enumerate(pending)]
            offsets = self._send(signed)
            # offsets only grow: once one record landed past its offset, every later one did too
            landed = next((i for i, o in enumerate(offsets) if o != at + i), len(offsets))
            placed.extend(offsets[:landed])
            self._next_offset = max(offsets) + 1
            if landed == len(pending):
                return placed
            log.info("quota store %s: %d record(s) lost a race with another writer; signing them again for "
                     "offset %d", self, len(pending) - landed, self._next_offset)
            pending, at = pending[landed:], self._next_offset
        raise StoreError(f"quota store {self}: cannot write: other writers took the offsets of {len(pending)} "
                         f"record(s) {PLACEMENT_ATTEMPTS} times in a row")

    @property
    def signed(self) -> bool:
        """Whether this store signs and verifies its records (``quotaflow.store.signing.key.file``)."""
        return self.signer is not None

    def metric_samples(self, now_ms: int) -> Iterator[MetricSample]:
        """``kafka_server_quota_store_rejected_records``: records skipped (unsigned, badly signed, replayed or
        invalid) since this store was opened."""
        yield MetricSample("rejected-records", "QuotaStore", (("topic", self.spec.topic),),
                           float(self.rejected_records),
                           "Records of the quota store topic skipped: unsigned, badly signed, replayed or invalid")

    # -- QuotaStore ----------------------------------------------------------------------------------------

    @property
    def rejected_records(self) -> int:
        """Records that failed validation (a foreign or broken writer), each skipped whole."""
        with self._cond:
            return self._view.rejected

    def snapshot(self) -> Snapshot:
        with self._cond:
            return self._view.snapshot()

    def get(self, entity: QuotaEntity) -> Values:
        with self._cond:
            return dict(self._view.entities.get(entity, {}))

    def alter(self, changes: Sequence[EntityChange]) -> int:
        """One record per entity (all-or-nothing each); returns the seq after the last of them."""
        ts = self._clock_ms()
        records = [quota_record(entity, ops, ts) for entity, ops in changes if ops]
        if not records:
            return self.last_seq()
        return max(self._append(records)) + 1

    def changes_since(self, seq: int, limit: int | None = None) -> list[Change]:
        with self._cond:
            return self._view.changes_since(seq, limit)

    def last_seq(self) -> int:
        with self._cond:
            return self._view.position

    def put_credential(self, credential: Credential) -> None:
        self._append([credential_record(credential)])

    def get_credential(self, user: str) -> Credential | None:
        with self._cond:
            return self._view.credentials.get(user)

    def delete_credential(self, user: str) -> bool:
        """Every credential of ``user`` (PLAIN and SCRAM); True when one existed right before this delete's records
        in the log (the view may lag the log, so the tombstones are always written)."""
        offsets = set(self._append(credential_tombstones(user)))
        with self._cond:
            return any(removed for at, removed in self._view.tombstones if at in offsets)

    def list_credentials(self) -> list[str]:
        with self._cond:
            return self._view.users()

    def put_scram_credential(self, credential: ScramCredential) -> None:
        self._append([scram_record(credential)])

    def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        """One SCRAM mechanism's credential of ``user`` (KIP-554 deletions); True when it existed right before the
        tombstone in the log."""
        offsets = set(self._append([scram_tombstone(user, mechanism)]))
        with self._cond:
            return any(removed for at, removed in self._view.tombstones if at in offsets)

    def get_scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        with self._cond:
            return self._view.scram.get((user, mechanism))

    # -- ACLs ---------------------------------------------------------------------------------------------------

    def acls(self) -> AclSnapshot:
        with self._cond:
            return AclSnapshot(self._view.acl_version, frozenset(self._view.acls))

    def acl_version(self) -> int:
        with self._cond:
            return self._view.acl_version

    def acl_changes_since(self, version: int) -> list[AclChange] | None:
        """From the view's bounded log of the ACL records it applied (no broker read; None past its bound)."""
        with self._cond:
            return self._view.acl_changes_since(version)

    def add_acls(self, bindings: Sequence[AclBinding]) -> int:
        """One record per binding this view does not hold yet (a duplicate from a racing writer changes nothing
        when applied)."""
        ts = self._clock_ms()
        with self._cond:
            new = [b for b in dict.fromkeys(bindings) if b not in self._view.acls]
        if new:
            self._append([acl_record(b, ts) for b in new])
        return self.acl_version()

    def remove_acls(self, bindings: Sequence[AclBinding]) -> int:
        """A tombstone per binding (written even if this view lags: the log decides)."""
        if bindings:
            self._append([acl_record(b, None) for b in dict.fromkeys(bindings)])
        return self.acl_version()

    # -- shadow sets ---------------------------------------------------------------------------------------------

    def shadow(self) -> ShadowSet | None:
        with self._cond:
            return self._view.shadow()

    def shadow_version(self) -> int:
        with self._cond:
            return self._view.shadow_version

    def shadow_sets(self) -> list[ShadowSet]:
        with self._cond:
            return list(self._view.shadows.values())

    def promotions(self) -> list[Promotion]:
        with self._cond:
            return list(self._view.promotions)

    def start_shadow(self, name: str, started_by: str, changes: Sequence[EntityChange]) -> ShadowSet:
        """One record (a running set ends ``replaced`` where it lands). Refused before anything is written when the
        set could never be promoted: its promotion, one record, would exceed ``MAX_RECORD_BYTES``."""
        ts = self._clock_ms()
        record = shadow_record("start", ts, started_by, name=name, changes=tuple(changes))
        with self._cond:
            previous, applied = effective(changes, lambda e: self._view.entities.get(e, {}))
        self._check_size(shadow_record(PROMOTE, ts, started_by, shadow=0, effective_ms=ts, previous=previous,
                                       applied=applied), f"shadow set {name!r}", "its promotion")
        self._check_size(record, f"shadow set {name!r}", "its start")
        (offset,) = self._append([record])
        with self._cond:
            shadow = self._view.shadows.get(offset + 1)
        if shadow is None:  # applied by every reader, unless it failed to validate (then it is rejected)
            raise StoreError(f"quota store {self}: the shadow set's record at offset {offset} was not applied "
                             f"(see the store's rejected records)")
        return shadow

    def stop_shadow(self, stopped_by: str) -> ShadowSet | None:
        with self._cond:
            running = self._view.shadow()
        if running is None:
            return None
        (offset,) = self._append([shadow_record("stop", self._clock_ms(), stopped_by, shadow=running.id)])
        if not self._applied(offset):
            return None  # another writer ended it first
        with self._cond:
            return self._view.shadows[running.id]

    def promote_shadow(self, by: str, effective_ms: int) -> Promotion:
        """ONE record holding every operation (with the values it replaces), applied by every reader at one
        position; it applies only if the set it names still runs where it lands (a racing stop, replace or promote
        wins otherwise: nothing changes and this raises)."""
        ts = self._clock_ms()
        with self._cond:
            running = self._view.shadow()
            if running is None:
                raise ShadowStateError("no shadow set is running: nothing to promote (`quotaflow shadow start`)")
            previous, applied = effective(running.changes, lambda e: self._view.entities.get(e, {}))
        record = shadow_record(PROMOTE, ts, by, shadow=running.id, effective_ms=effective_ms, previous=previous,
                               applied=applied)
        self._check_size(record, f"shadow set {running.name!r}", "its promotion")
        (offset,) = self._append([record])
        if not self._applied(offset):
            raise ShadowStateError(f"shadow set {running.id} ({running.name!r}) was stopped, replaced or promoted "
                                   f"by another writer before this promotion reached the store: nothing changed")
        return self._promotion(offset)

    def rollback(self, by: str, effective_ms: int, *, force: bool = False) -> Promotion:
        """One record restoring the newest promotion's keys, after the check against this store's view (a write
        racing the check lands before or after the rollback, as any two alters do); it applies only if that
        promotion is still the newest not rolled back where it lands."""
        ts = self._clock_ms()
        with self._cond:
            target = rollback_target(self._view.promotions)
            check_rollback(target, lambda e: self._view.entities.get(e, {}), force)
            previous, applied = effective(target.previous, lambda e: self._view.entities.get(e, {}))
        record = shadow_record(ROLLBACK, ts, by, shadow=target.shadow_id, effective_ms=effective_ms,
                               previous=previous, applied=applied)
        self._check_size(record, f"the rollback of promotion {target.id}", "it")
        (offset,) = self._append([record])
        if not self._applied(offset):
            raise ShadowStateError(f"promotion {target.id} ({target.shadow_name!r}) was rolled back by another "
                                   f"writer before this rollback reached the store: nothing changed")
        return self._promotion(offset)

    def _applied(self, offset: int) -> bool:
        with self._cond:
            return any(applied for at, applied in self._view.shadow_results if at == offset)

    def _promotion(self, offset: int) -> Promotion:
        with self._cond:
            return next(p for p in reversed(self._view.promotions) if p.id == offset + 1)

    def _check_size(self, record: tuple[bytes, bytes], what: str, part: str) -> None:
        size = record_size(record)
        if size > MAX_RECORD_BYTES:
            raise StoreError(
                f"quota store {self}: {what} is too large for one record: {part} takes {size} bytes, more than the "
                f"{MAX_RECORD_BYTES} a kafka:// store record may hold (Kafka's max.message.bytes); a promotion is "
                f"one record so that every gateway switches at once: split the proposal into smaller shadow sets")

    def close(self) -> None:
        self._stop.set()
        thread = getattr(self, "_thread", None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        for client in (self._producer, self._consumer):
            if client is not None:
                try:
                    client.close(timeout=2) if client is self._producer else client.close()
                except Exception as e:  # closing is best effort: the process is usually about to exit
                    log.debug("closing %s: %s", client, e)
        self._producer = self._consumer = None

    def __enter__(self) -> KafkaStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unreachable(error: BaseException) -> bool:
    """kafka-python's ways of saying that no bootstrap server answered."""
    name = type(error).__name__
    return name == "NoBrokersAvailable" or (name == "KafkaTimeoutError" and "bootstrap" in str(error).lower())


def _client_reason(error: BaseException) -> str:
    """kafka-python's error in one line, without its class name twice."""
    name = type(error).__name__
    text = str(error).strip()
    if name == "NoBrokersAvailable":
        return "no broker reachable (check the bootstrap servers and security settings)"
    if text.startswith(name):
        text = text[len(name):].lstrip(": ")
    return f"{name}: {text}" if text else name


if TYPE_CHECKING:  # mypy checks that KafkaStore satisfies the QuotaStore protocol exactly
    _conforms: QuotaStore = KafkaStore("kafka://127.0.0.1:9092")
    _scram: ScramStore = KafkaStore("kafka://127.0.0.1:9092")
    _acls: AclStore = KafkaStore("kafka://127.0.0.1:9092")
    _shadows: ShadowStore = KafkaStore("kafka://127.0.0.1:9092")
