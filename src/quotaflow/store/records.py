"""The store as a log of records, and the view every reader builds by applying them in order (pure, no I/O).

A quota record is one entity's validated operations (``key -> value``, or null to remove the key): appending
operations instead of whole entities is what lets two writers alter the same entity at the same time without
losing either's operations, while each entity stays all-or-nothing. Its key is ``["quota", entity path, sorted
keys it touches]``, which makes log compaction safe: for every quota key, the last record touching it is the last
record with its exact key set, so it survives compaction, and applying the survivors in order yields the same
values as the whole log. A credential record is keyed by user (SASL/PLAIN) or by user and mechanism (SCRAM) and
holds derived key material only; a null value (a tombstone) deletes it.

A record's change-log ``seq`` is its offset + 1, the position after it (as Kafka commits offsets), so seq 0 means
"nothing yet" and ``changes_since(0)`` is everything, as with the SQLite store.

With a signer, every record is signed for the offset it is written at (:mod:`quotaflow.store.signing`) and a
reader applies it only there. That is what makes a record never replayable, whatever its age and however quiet
the store: an offset is used once, so the copy of a quota, an ACL or a credential written again, after a newer
record of its key or after that key's tombstone, lands at another offset and is refused by every reader. The rule
reads nothing but the record itself, so it gives the same answer on the whole log, on a compacted log (compaction
keeps offsets) and after a restart (no state outside the topic). Writers learn the offset from their view's
position and re-sign what lost a race with another writer (:meth:`quotaflow.store.kafka.KafkaStore._append`).

Shadow sets (``quotaflow shadow``) are records too, one per start, stop, promote and rollback, each under a key of
its own (never compacted: they are the history). A promotion is ONE record carrying every operation it applies
(with the values they replace), so every reader applies all of it at one position: its changes share its seq. A
stop, promote or rollback names what it ends or undoes and applies only if that is still the case where it lands
in the log (the running set; the newest promotion not rolled back), so two writers racing cannot both promote, and
every reader decides alike (those records are never compacted, the decision reads nothing else).

A checkpoint is the state as of a position (:class:`StoreState`) in chunk records holding the store's own records,
named by a :class:`Manifest`; the log's readers skip both, a reader starting from one loads it
(:meth:`StoreView.load_checkpoint`) with the same validation as the records.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import math
import typing
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Final

from quotaflow.core.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding_problem,
    from_code,
)
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.errors import QuotaflowError
from quotaflow.core.validation import config_keys_for_entity, validate_quota_key_value
from quotaflow.store.base import (
    AclChange,
    Change,
    Credential,
    EntityChange,
    Promotion,
    ScramCredential,
    ShadowSet,
    Snapshot,
    Values,
)
from quotaflow.store.ratelog import RejectionLog
from quotaflow.store.scram import HASHES
from quotaflow.store.shadowing import (
    OUTCOMES,
    PROMOTE,
    PROMOTED,
    REPLACED,
    ROLLBACK,
    RUNNING,
    STOPPED,
    changes_to_json,
    decode_value,
    encode_value,
    rollback_target,
)
from quotaflow.store.signing import RecordSigner, Verified

log = logging.getLogger(__name__)

QUOTA_KIND: Final = "quota"
CREDENTIAL_KIND: Final = "credential"
SCRAM_KIND: Final = "scram"
ACL_KIND: Final = "acl"
CHECKPOINT_KIND: Final = "checkpoint"  # a manifest: the state as of a position is in the chunks it lists
CHUNK_KIND: Final = "checkpoint-chunk"
SHADOW_KIND: Final = "shadow"  # a start, stop, promote or rollback of a shadow set
SHADOW_STATE_KIND: Final = "shadow-state"  # a checkpoint's shadow set (with how it ended)
PROMOTION_STATE_KIND: Final = "promotion-state"  # a checkpoint's promotion or rollback
ACL_CHANGE_LOG: Final = 10_000  # the newest effective ACL changes a view keeps for pollers (older: read the set)
CHUNK_RECORDS: Final = 2_000  # state records per chunk: ~200 KB, well under the 1 MB of max.message.bytes
CHUNK_BYTES: Final = 500_000  # shadow history packed per chunk (one entry alone may take up to MAX_RECORD_BYTES)
MAX_RECORD_BYTES: Final = 1_000_000
"""The largest record (key + value) a writer sends: under Kafka's default ``max.message.bytes`` (1048588) and the
producer's ``max.request.size`` (1048576), with room for headers and the batch."""
MANIFEST_KEY: Final = b'["checkpoint",0]'
_CREDENTIAL_TYPES: Final = typing.get_type_hints(Credential)
_SCRAM_TYPES: Final = typing.get_type_hints(ScramCredential)


def _compact_json(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()


def quota_record(entity: QuotaEntity, ops: Mapping[str, float | None], ts_ms: int) -> tuple[bytes, bytes]:
    """One entity's operations as one record (key, value)."""
    key = _compact_json([QUOTA_KIND, entity.path, sorted(ops)])
    return key, _compact_json({"entity": entity.path, "ops": {k: encode_value(v) for k, v in ops.items()},
                               "ts": ts_ms})


def shadow_record(op: str, ts_ms: int, by: str, **fields: Any) -> tuple[bytes, bytes]:
    """A shadow-set record: ``op`` start (``name``, ``changes``), stop (``shadow``), promote or rollback
    (``shadow``, ``effective_ms``, ``previous``, ``applied``). Its key is unique (``uuid4``), so compaction keeps
    every one: they are the history."""
    import uuid

    doc: dict[str, Any] = {"op": op, "by": by, "ts": ts_ms}
    for name, value in fields.items():
        doc[name] = changes_to_json(value) if name in ("changes", "previous", "applied") else value
    return _compact_json([SHADOW_KIND, uuid.uuid4().hex]), _compact_json(doc)


def record_size(record: tuple[bytes, bytes | None]) -> int:
    return len(record[0]) + len(record[1] or b"")


def _decode_changes(doc: object, *, removals: bool = True) -> tuple[EntityChange, ...]:
    """Entity changes of a shadow record or checkpoint entry, each validated as a quota record is."""
    if not isinstance(doc, list):
        raise ValueError("changes are a list")
    out: list[EntityChange] = []
    for entry in doc:
        entity, ops = _validated_ops(QuotaEntity.from_path(str(entry["entity"])), dict(entry["ops"]))
        if not removals and any(v is None for v in ops.values()):
            raise ValueError("a removal where only values belong")
        out.append((entity, ops))
    return tuple(out)


def _fields(credential: Credential | ScramCredential) -> bytes:
    """Every field of a stored credential (salt, iterations, derived keys; bytes as base64). A password never
    reaches the store."""
    return _compact_json({f.name: (base64.b64encode(v).decode() if isinstance(v := getattr(credential, f.name), bytes)
                                   else v) for f in dataclasses.fields(credential)})


def credential_record(credential: Credential) -> tuple[bytes, bytes]:
    return _credential_key(credential.user), _fields(credential)


def scram_record(credential: ScramCredential) -> tuple[bytes, bytes]:
    return _compact_json([SCRAM_KIND, credential.user, credential.mechanism]), _fields(credential)


def credential_tombstones(user: str) -> list[tuple[bytes, None]]:
    """Every credential ``user`` may hold: PLAIN and each SCRAM mechanism (written whether or not the reader's view
    has them yet)."""
    return [(_credential_key(user), None), *((_compact_json([SCRAM_KIND, user, m]), None) for m in sorted(HASHES))]


def scram_tombstone(user: str, mechanism: str) -> tuple[bytes, None]:
    return _compact_json([SCRAM_KIND, user, mechanism]), None


def acl_record(binding: AclBinding, ts_ms: int | None) -> tuple[bytes, bytes | None]:
    """An ACL binding is its own key (so compaction keeps the last word on each binding); ``ts_ms`` None makes the
    tombstone that removes it."""
    p, e = binding.pattern, binding.entry
    key = _compact_json([ACL_KIND, int(p.resource_type), p.name, int(p.pattern_type), e.principal, e.host,
                         int(e.operation), int(e.permission_type)])
    return key, None if ts_ms is None else _compact_json({"ts": ts_ms})


def _decode_acl_key(kind: list[Any]) -> AclBinding:
    """The binding an ACL record's key names, validated as CreateAcls validates it."""
    _kind, rt, name, pt, principal, host, op, perm = kind
    if not all(isinstance(v, int) for v in (rt, pt, op, perm)) or not all(
            isinstance(v, str) for v in (name, principal, host)):
        raise ValueError("malformed ACL record key")
    binding = AclBinding(ResourcePattern(from_code(ResourceType, rt, ResourceType.UNKNOWN), name,
                                         from_code(PatternType, pt, PatternType.UNKNOWN)),
                         AccessControlEntry(principal, host, from_code(AclOperation, op, AclOperation.UNKNOWN),
                                            from_code(AclPermissionType, perm, AclPermissionType.UNKNOWN)))
    problem = binding_problem(binding)
    if problem is not None:
        raise ValueError(problem)
    return binding


def credential_tombstone(user: str) -> tuple[bytes, None]:
    return _credential_key(user), None


def _credential_key(user: str) -> bytes:
    return _compact_json([CREDENTIAL_KIND, user])


def _decode_fields(value: bytes, types: Mapping[str, Any]) -> dict[str, Any]:
    doc = json.loads(value)
    return {name: base64.b64decode(doc[name], validate=True) if kind is bytes else kind(doc[name])
            for name, kind in types.items()}


def _decode_credential(value: bytes) -> Credential:
    return Credential(**_decode_fields(value, _CREDENTIAL_TYPES))


def _decode_quota(value: bytes) -> tuple[QuotaEntity, dict[str, float | None], int]:
    """A quota record's entity and operations, validated (:func:`_validated_ops`)."""
    doc = json.loads(value)
    entity, ops = _validated_ops(QuotaEntity.from_path(str(doc["entity"])), dict(doc["ops"]))
    return entity, ops, int(doc["ts"])


def _validated_ops(entity: QuotaEntity, raw: Mapping[str, object]) -> tuple[QuotaEntity, dict[str, float | None]]:
    """An entity's operations validated as AlterClientQuotas validates them (keys allowed for the entity, values
    in range), so a broken or foreign writer cannot put into the view what the API refuses."""
    wire: dict[str | None, str | None] = {k: v for k, v in entity.to_wire().items()}
    allowed = config_keys_for_entity(wire, resolver=lambda _host: True)  # no DNS lookups while replaying
    ops: dict[str, float | None] = {}
    for k, value in raw.items():
        v = decode_value(value)
        if v is not None:
            validate_quota_key_value(allowed, k, v)
        ops[str(k)] = v
    if not ops:
        raise ValueError("a quota record without operations")
    return entity, ops


def _placement_problem(verified: Verified, offset: int) -> str | None:
    """Why a signed record does not apply at ``offset``, or None when it does."""
    if verified.error is not None:
        return verified.error
    if verified.offset is None:
        return ("signed without its offset (by a quotaflow that did not bind records to offsets, or a record of "
                "another kind): refused, it could be a replay; `quotaflow store copy` re-signs a store")
    if verified.offset != offset:
        return (f"signed for offset {verified.offset}, found at {offset}: a replayed record, or a write that lost a "
                f"race with another writer (its writer signs it again for its new offset)")
    return None


def _within(applied: Sequence[EntityChange], allowed: Sequence[EntityChange]) -> bool:
    """Every operation of ``applied`` is one of ``allowed`` (same entity, key and value)."""
    held = {(e, k): v for e, ops in allowed for k, v in ops.items()}
    return all((e, k) in held and _same_value(held[(e, k)], v) for e, ops in applied for k, v in ops.items())


def _same_value(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b))


@dataclasses.dataclass(frozen=True, slots=True)
class StoreState:
    """What a checkpoint holds: every quota entity, credential and ACL binding, and the shadow history."""

    entities: dict[QuotaEntity, Values]
    credentials: dict[str, Credential]
    scram: dict[tuple[str, str], ScramCredential]
    acls: set[AclBinding]
    shadows: list[ShadowSet] = dataclasses.field(default_factory=list)
    promotions: list[Promotion] = dataclasses.field(default_factory=list)

    def __len__(self) -> int:
        return (len(self.entities) + len(self.credentials) + len(self.scram) + len(self.acls) + len(self.shadows)
                + len(self.promotions))

    def chunks(self) -> list[tuple[bytes, bytes]]:
        """The state as chunk records: each holds up to ``CHUNK_RECORDS`` of the records that would rebuild it, in
        the store's own record format, so loading one validates exactly as applying the log does."""
        state: list[list[Any]] = [_pair(quota_record(entity, values, 0)) for entity, values in self.entities.items()]
        state.extend(_pair(credential_record(c)) for c in self.credentials.values())
        state.extend(_pair(scram_record(c)) for c in self.scram.values())
        state.extend(_pair(acl_record(b, 0)) for b in self.acls)
        chunks = [_compact_json(state[i:i + CHUNK_RECORDS]) for i in range(0, len(state), CHUNK_RECORDS)]
        # the shadow history after the rest, packed by size: one entry may be as large as a whole record
        history = [_compact_json(e) for e in (*map(_shadow_entry, self.shadows), *map(_promotion_entry,
                                                                                       self.promotions))]
        packed: list[bytes] = []
        for entry in history:
            if packed and sum(map(len, packed)) + len(entry) > CHUNK_BYTES:
                chunks.append(b"[" + b",".join(packed) + b"]")
                packed = []
            packed.append(entry)
        if packed:
            chunks.append(b"[" + b",".join(packed) + b"]")
        return [(_compact_json([CHUNK_KIND, i]), chunk) for i, chunk in enumerate(chunks or [b"[]"])]


def _pair(record: tuple[bytes, bytes | None]) -> list[Any]:
    return [json.loads(record[0]), None if record[1] is None else json.loads(record[1])]


def _shadow_entry(shadow: ShadowSet) -> list[Any]:
    return [[SHADOW_STATE_KIND, shadow.id], {
        "name": shadow.name, "started_by": shadow.started_by, "started_ms": shadow.started_ms,
        "changes": changes_to_json(shadow.changes), "outcome": shadow.outcome, "ended_by": shadow.ended_by,
        "ended_ms": shadow.ended_ms}]


def _promotion_entry(p: Promotion) -> list[Any]:
    return [[PROMOTION_STATE_KIND, p.id], {
        "kind": p.kind, "shadow_id": p.shadow_id, "shadow_name": p.shadow_name, "by": p.by, "at_ms": p.at_ms,
        "effective_ms": p.effective_ms, "first_seq": p.first_seq, "last_seq": p.last_seq,
        "previous": changes_to_json(p.previous), "applied": changes_to_json(p.applied)}]


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)


def _shadow_from_entry(shadow_id: Any, doc: Mapping[str, Any]) -> ShadowSet:
    outcome = str(doc["outcome"])
    if outcome not in OUTCOMES:
        raise ValueError(f"a shadow set ending {outcome!r}")
    ended_ms = doc["ended_ms"]
    return ShadowSet(int(shadow_id), str(doc["name"]), str(doc["started_by"]), int(doc["started_ms"]),
                     _decode_changes(doc["changes"]), outcome, _optional_str(doc["ended_by"]),
                     None if ended_ms is None else int(ended_ms))


def _promotion_from_entry(promotion_id: Any, doc: Mapping[str, Any]) -> Promotion:
    kind = str(doc["kind"])
    if kind not in (PROMOTE, ROLLBACK):
        raise ValueError(f"a promotion of kind {kind!r}")
    return Promotion(int(promotion_id), kind, int(doc["shadow_id"]), str(doc["shadow_name"]), str(doc["by"]),
                     int(doc["at_ms"]), int(doc["effective_ms"]), int(doc["first_seq"]), int(doc["last_seq"]),
                     _decode_changes(doc["previous"]), _decode_changes(doc["applied"]))


@dataclasses.dataclass(frozen=True, slots=True)
class Manifest:
    """A checkpoint: the state as of ``position`` (every record below it applied) is in the chunk records at
    ``chunks`` (offsets); ``acl_version`` is the view's at that position."""

    position: int
    acl_version: int
    chunks: tuple[int, ...]
    shadow_version: int = 0  # absent from a manifest written before shadow sets existed

    def record(self) -> tuple[bytes, bytes]:
        return MANIFEST_KEY, _compact_json({"position": self.position, "acl_version": self.acl_version,
                                            "chunks": list(self.chunks), "shadow_version": self.shadow_version})

    @classmethod
    def decode(cls, value: bytes | None) -> Manifest:
        if value is None:
            raise ValueError("a checkpoint without a manifest")
        doc = json.loads(value)
        chunks = tuple(int(o) for o in doc["chunks"])
        position, acl_version = int(doc["position"]), int(doc["acl_version"])
        shadow_version = int(doc.get("shadow_version", 0))
        if (not chunks or position < 0 or not 0 <= acl_version <= position or min(chunks) < 0
                or not 0 <= shadow_version <= position):
            raise ValueError("a malformed checkpoint manifest")
        return cls(position, acl_version, chunks, shadow_version)


class StoreView:
    """Entities, credentials and the change log as of ``position`` (the next offset to apply). Not thread-safe:
    the owner serializes access."""

    def __init__(self, name: str = "store", *, signer: RecordSigner | None = None, topic: str = "") -> None:
        self.name = name
        # with a signer, only records signed with one of its keys, at the offset they were signed for, apply: the
        # topic's writers without the fleet key can forge nothing, with it they cannot replay (quotaflow.store.signing)
        self.signer = signer
        self.topic = topic
        self.newest_ms = 0  # the newest signed time applied: writers sign after it (times move forward in the log)
        self.entities: dict[QuotaEntity, Values] = {}
        self.credentials: dict[str, Credential] = {}
        self.scram: dict[tuple[str, str], ScramCredential] = {}  # (user, mechanism)
        self.changes: list[Change] = []
        self.acls: set[AclBinding] = set()
        self.acl_version = 0  # the position after the last effective ACL change
        self.shadows: dict[int, ShadowSet] = {}  # every shadow set by id (its start's seq), oldest first
        self.running: int | None = None  # the id of the running one
        self.promotions: list[Promotion] = []
        self.shadow_version = 0  # the position after the last effective shadow record
        # (offset, applied) of the latest shadow records: a writer learns whether its stop / promote / rollback
        # still applied where it landed (another writer may have ended the set first)
        self.shadow_results: deque[tuple[int, bool]] = deque(maxlen=1024)
        # the newest effective ACL changes (bounded: a gateway behind by more reads the whole set), and the version
        # above which every change is in it
        self.acl_changes: deque[AclChange] = deque(maxlen=ACL_CHANGE_LOG)
        self.acl_changes_from = 0
        self.position = 0
        self.rejected = 0
        self._rejections = RejectionLog(log, f"quota store {name}")
        self._ordered: list[tuple[QuotaEntity, Values]] | None = None  # entities by path, until the next change
        # (offset, removed something) of the latest credential tombstones: a delete learns whether the user
        # existed right before its own record, whatever other writers did
        self.tombstones: deque[tuple[int, bool]] = deque(maxlen=1024)
        self.checkpoint_at = 0  # the position the newest checkpoint read reflects (writers add one when far behind)
        self.records_read = 0  # records passed to apply or load: what a reader had to read

    def placement_problem(self, offset: int, key: bytes | None, value: bytes | None,
                          headers: Sequence[tuple[str, bytes | None]]) -> str | None:
        """Why a record cannot be trusted at ``offset`` (None: it can; always None without a signer)."""
        if self.signer is None:
            return None
        return _placement_problem(self.signer.verify(self.topic, key, value, headers), offset)

    def advance(self, position: int) -> None:
        """Offsets below ``position`` hold nothing more (compacted away, or transaction markers)."""
        self.position = max(self.position, position)

    def apply(self, offset: int, key: bytes | None, value: bytes | None,
              headers: Sequence[tuple[str, bytes | None]] = ()) -> None:
        """Apply one record; one that does not decode or validate, or (with a signer) is not signed with the fleet
        key for this very offset (a forgery, a replay), is skipped whole (and counted)."""
        self.position = max(self.position, offset + 1)
        self.records_read += 1
        if self.signer is not None:
            verified = self.signer.verify(self.topic, key, value, headers)
            error = _placement_problem(verified, offset)
            if error is not None:
                self.rejected += 1
                self._rejections.skipped(offset, error)
                return
            self.newest_ms = max(self.newest_ms, verified.ts_ms or 0)
        try:
            kind = json.loads(key or b"null")
            if not isinstance(kind, list) or len(kind) < 2:
                raise ValueError("not a quotaflow store key")
            if kind[0] == CREDENTIAL_KIND:
                self._apply_credential(offset, str(kind[1]), value)
                return
            if kind[0] == SCRAM_KIND:
                self._apply_scram(offset, str(kind[1]), str(kind[2]), value)
                return
            if kind[0] == ACL_KIND:
                self._apply_acl(offset, _decode_acl_key(kind), value)
                return
            if kind[0] == SHADOW_KIND:
                if value is None:
                    raise ValueError("a shadow record without a value")
                self._apply_shadow(offset, json.loads(value))
                return
            if kind[0] == CHUNK_KIND:
                return  # a checkpoint's state: what a reader starting from it loads; the log already applied
            if kind[0] == CHECKPOINT_KIND:
                self.checkpoint_at = max(self.checkpoint_at, Manifest.decode(value).position)
                return
            if kind[0] != QUOTA_KIND or value is None:
                raise ValueError("not a quotaflow store record")
            entity, ops, ts = _decode_quota(value)
            if kind[1] != entity.path or kind[2] != sorted(ops):
                raise ValueError("record key does not match its operations")
        except (ValueError, TypeError, KeyError, IndexError, QuotaflowError) as e:
            self.rejected += 1
            self._rejections.skipped(offset, str(e))
            return
        self._apply_ops(offset + 1, ts, entity, ops)

    def _apply_credential(self, offset: int, user: str, value: bytes | None) -> None:
        if value is None:
            self.tombstones.append((offset, self.credentials.pop(user, None) is not None))
            return
        credential = _decode_credential(value)
        if credential.user != user:
            raise ValueError("credential user does not match its key")
        self.credentials[user] = credential

    def _apply_scram(self, offset: int, user: str, mechanism: str, value: bytes | None) -> None:
        if mechanism not in HASHES:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
        if value is None:
            self.tombstones.append((offset, self.scram.pop((user, mechanism), None) is not None))
            return
        credential = ScramCredential(**_decode_fields(value, _SCRAM_TYPES))
        if (credential.user, credential.mechanism) != (user, mechanism):
            raise ValueError("SCRAM credential does not match its key")
        self.scram[(user, mechanism)] = credential

    def _apply_acl(self, offset: int, binding: AclBinding, value: bytes | None) -> None:
        added = value is not None
        if (binding in self.acls) == added:
            return  # adding a held binding, removing an absent one: no change
        if added:
            self.acls.add(binding)
        else:
            self.acls.discard(binding)
        self.acl_version = offset + 1
        changes = self.acl_changes
        if len(changes) == changes.maxlen:  # the oldest falls out: a poller behind it reads the whole set
            self.acl_changes_from = changes[0].version
        changes.append(AclChange(self.acl_version, binding, added))

    def acl_changes_since(self, version: int) -> list[AclChange] | None:
        """The effective ACL changes after ``version``, oldest first; None when they are not all held (older than
        the bounded log, or before the checkpoint this view started from). The work is the changes returned."""
        if version < self.acl_changes_from or version > self.acl_version:
            return None
        out: list[AclChange] = []
        for change in reversed(self.acl_changes):
            if change.version <= version:
                break
            out.append(change)
        out.reverse()
        return out

    # -- shadow sets -------------------------------------------------------------------------------------------------

    def _apply_shadow(self, offset: int, doc: Mapping[str, Any]) -> None:
        """A start always applies (ending the running set as ``replaced``); a stop or promote only while the set
        it names runs, a rollback only for the newest promotion not rolled back, and a promote or rollback only
        with operations its set / promotion holds. One that no longer applies is a lost race, not an error: it
        changes nothing and its writer is told (:attr:`shadow_results`)."""
        op, by, ts = str(doc["op"]), str(doc["by"]), int(doc["ts"])
        seq = offset + 1
        if op == "start":
            name, changes = str(doc["name"]), _decode_changes(doc["changes"])
            self._end_running(REPLACED, by, ts)
            self.shadows[seq] = ShadowSet(seq, name, by, ts, changes)
            self.running = seq
        elif op == "stop":
            if self.running is None or self.running != int(doc["shadow"]):
                self.shadow_results.append((offset, False))
                return
            self._end_running(STOPPED, by, ts)
        elif op in (PROMOTE, ROLLBACK):
            shadow_id, effective_ms = int(doc["shadow"]), int(doc["effective_ms"])
            previous, applied = _decode_changes(doc["previous"]), _decode_changes(doc["applied"])
            if [e for e, _ in previous] != [e for e, _ in applied] or any(
                    set(b) != set(a) for (_, b), (_, a) in zip(previous, applied, strict=True)):
                raise ValueError(f"a {op} whose previous and applied values name different keys")
            if op == PROMOTE:
                if self.running != shadow_id:
                    self.shadow_results.append((offset, False))
                    return
                allowed = self.shadows[shadow_id].changes
                name = self.shadows[shadow_id].name
            else:
                try:
                    target = rollback_target(self.promotions)
                except QuotaflowError:
                    target = None
                if target is None or target.shadow_id != shadow_id:
                    self.shadow_results.append((offset, False))
                    return
                allowed, name = target.previous, target.shadow_name
            if not _within(applied, allowed):
                raise ValueError(f"a {op} applying what its {'shadow set' if op == PROMOTE else 'promotion'} "
                                 f"does not hold")
            for entity, ops in applied:
                self._apply_ops(seq, ts, entity, ops, effective_ms)
            if op == PROMOTE:
                self._end_running(PROMOTED, by, ts)
            self.promotions.append(Promotion(seq, op, shadow_id, name, by, ts, effective_ms, seq, seq, previous,
                                             applied))
        else:
            raise ValueError(f"unknown shadow operation {op!r}")
        self.shadow_version = seq
        self.shadow_results.append((offset, True))

    def _end_running(self, outcome: str, by: str, ts: int) -> None:
        if self.running is not None:
            self.shadows[self.running] = dataclasses.replace(self.shadows[self.running], outcome=outcome,
                                                             ended_by=by, ended_ms=ts)
            self.running = None

    def shadow(self) -> ShadowSet | None:
        return None if self.running is None else self.shadows[self.running]

    def users(self) -> list[str]:
        """Every user with a credential of any kind, sorted."""
        return sorted({*self.credentials, *(user for user, _m in self.scram)})

    def _apply_ops(self, seq: int, ts: int, entity: QuotaEntity, ops: Mapping[str, float | None],
                   effective_ms: int | None = None) -> None:
        """As the SQLite store: a set equal to the current value and the removal of an absent key change nothing
        and are not logged; an entity whose last key is removed disappears."""
        updated = dict(self.entities.get(entity, {}))
        for k, v in ops.items():
            old = updated.get(k)
            if v is None:
                if old is None:
                    continue
                del updated[k]
            else:
                if old is not None and (old == v or (math.isnan(old) and math.isnan(v))):
                    continue
                updated[k] = v
            self.changes.append(Change(seq, ts, entity, k, v, effective_ms))
        if updated:
            self.entities[entity] = updated
        else:
            self.entities.pop(entity, None)
        self._ordered = None

    def snapshot(self) -> Snapshot:
        """Every entity by path (as the SQLite store orders them); each caller gets its own dicts."""
        if self._ordered is None:
            self._ordered = sorted(self.entities.items(), key=lambda item: item[0].path)
        return Snapshot(self.position, {e: dict(v) for e, v in self._ordered})

    # -- checkpoints ---------------------------------------------------------------------------------------------

    def state(self) -> StoreState:
        """Copies of the state (cheap: the containers, not their immutable items), for a checkpoint built outside
        the owner's lock."""
        return StoreState(dict(self.entities), dict(self.credentials), dict(self.scram), set(self.acls),
                          list(self.shadows.values()), list(self.promotions))

    def load_checkpoint(self, manifest: Manifest, chunks: Sequence[bytes]) -> None:
        """Start this (empty) view from a checkpoint: the state as of ``manifest.position``. Its change log starts
        there: changes before the checkpoint are not in it (the fleet's gateways read the whole log)."""
        if self.position or self.records_read:
            raise ValueError("a checkpoint loads into an empty view only")
        for chunk in chunks:
            self.records_read += 1
            for key, value in json.loads(chunk):
                kind = list(key)
                if kind[0] == ACL_KIND:  # the bulk of a large store: decoded from the parsed key, no re-encoding
                    self.acls.add(_decode_acl_key(kind))
                elif kind[0] == QUOTA_KIND:
                    entity, ops, _ts = _decode_quota(_compact_json(value))
                    if any(v is None for v in ops.values()):
                        raise ValueError("a checkpoint's quota with a removal")
                    self.entities[entity] = typing.cast(Values, ops)
                elif kind[0] == CREDENTIAL_KIND:
                    self._apply_credential(-1, str(kind[1]), _compact_json(value))
                elif kind[0] == SCRAM_KIND:
                    self._apply_scram(-1, str(kind[1]), str(kind[2]), _compact_json(value))
                elif kind[0] == SHADOW_STATE_KIND:
                    shadow = _shadow_from_entry(kind[1], value)
                    self.shadows[shadow.id] = shadow
                    if shadow.outcome == RUNNING:
                        self.running = shadow.id
                elif kind[0] == PROMOTION_STATE_KIND:
                    self.promotions.append(_promotion_from_entry(kind[1], value))
                else:
                    raise ValueError(f"a checkpoint holding a {kind[0]!r} record")
        self._ordered = None
        if sum(s.outcome == RUNNING for s in self.shadows.values()) > 1:
            raise ValueError("a checkpoint with two running shadow sets")
        self.shadows = dict(sorted(self.shadows.items()))
        self.promotions.sort(key=lambda p: p.id)
        self.position = self.checkpoint_at = manifest.position
        self.acl_version = self.acl_changes_from = manifest.acl_version  # the changes before it are not known
        self.shadow_version = manifest.shadow_version

    def changes_since(self, seq: int, limit: int | None = None) -> list[Change]:
        lo, hi = 0, len(self.changes)
        while lo < hi:  # the first change with seq > seq (the list is in log order)
            mid = (lo + hi) // 2
            if self.changes[mid].seq <= seq:
                lo = mid + 1
            else:
                hi = mid
        out = self.changes[lo:]
        return out if limit is None else out[:limit]
