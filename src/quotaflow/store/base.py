"""The ``QuotaStore`` interface: durable quota entities, an append-only change log, and SASL credentials.

Every change gets a monotonically increasing sequence number, so engines and gateways poll ``changes_since(seq)``
and apply changes incrementally. ``alter`` applies the given per-entity changes atomically.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

from quotaflow.core.acl import AclBinding
from quotaflow.core.entities import QuotaEntity

Values: TypeAlias = dict[str, float]
# One entity's change: key -> new value, or None to remove the key.
EntityChange: TypeAlias = tuple[QuotaEntity, Mapping[str, float | None]]


@dataclass(frozen=True, slots=True)
class Change:
    """One applied key change. ``value`` None means the key was removed. Several changes may share one ``seq`` (a
    ``kafka://`` record: one entity's keys, or a whole promotion)."""

    seq: int
    ts_ms: int
    entity: QuotaEntity
    key: str
    value: float | None
    effective_ms: int | None = None
    """Set on the changes of a shadow promotion or rollback (:class:`Promotion`): the instant every gateway applies
    them, on its own clock (the batch is read early, so the fleet switches at once). None: apply when read."""

    @property
    def path(self) -> str:
        return self.entity.path


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every stored entity with its values, as of change ``seq``."""

    seq: int
    entities: dict[QuotaEntity, Values]


@dataclass(frozen=True, slots=True)
class Credential:
    """A SASL/PLAIN credential: salted slow hash (PBKDF2-HMAC-SHA512)."""

    user: str
    salt: bytes
    iterations: int
    hash: bytes


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """A SASL/SCRAM credential as Kafka stores it (``ScramCredential``): salt, StoredKey, ServerKey, iterations."""

    user: str
    mechanism: str  # SCRAM-SHA-256 | SCRAM-SHA-512
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


class QuotaStore(Protocol):
    def snapshot(self) -> Snapshot:
        """All entities and values, consistent with one change-log sequence number."""
        ...

    def get(self, entity: QuotaEntity) -> Values:
        """The values of one entity (empty when it does not exist)."""
        ...

    def alter(self, changes: Sequence[EntityChange]) -> int:
        """Apply each entity's changes all-or-nothing (the whole call is one transaction); return the last seq.
        Entities whose last key is removed disappear. Validation is the caller's job (``quotaflow.admin``)."""
        ...

    def changes_since(self, seq: int, limit: int | None = None) -> list[Change]:
        """Changes with sequence number > ``seq`` in order."""
        ...

    def last_seq(self) -> int: ...

    def put_credential(self, credential: Credential) -> None: ...

    def get_credential(self, user: str) -> Credential | None: ...

    def delete_credential(self, user: str) -> bool: ...

    def list_credentials(self) -> list[str]: ...

    def close(self) -> None: ...


@runtime_checkable
class ScramStore(Protocol):
    """A store that also keeps SCRAM credentials (the SQLite store does; ``delete_credential`` removes them too)."""

    def put_scram_credential(self, credential: ScramCredential) -> None: ...

    def get_scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...

    def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        """One mechanism's credential (KIP-554 deletions); True when it existed."""
        ...

    def list_credentials(self) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class AclSnapshot:
    """Every stored ACL binding, as of ACL version ``version`` (0: none was ever written)."""

    version: int
    bindings: frozenset[AclBinding]


@dataclass(frozen=True, slots=True)
class AclChange:
    """One effective ACL change: ``binding`` added (or removed), which moved the ACL version to ``version``."""

    version: int
    binding: AclBinding
    added: bool


def net_acl_change(changes: Iterable[AclChange]) -> tuple[set[AclBinding], set[AclBinding]]:
    """(added, removed): what ``changes``, in order, do to the set they started from (a binding added then removed
    is in ``removed``, absent from that set; removed then added is in ``added``, held by it: applying either is no
    change, as :meth:`quotaflow.core.authorizer.AclIndex.updated` treats them)."""
    added: set[AclBinding] = set()
    removed: set[AclBinding] = set()
    for change in changes:
        into, out_of = (added, removed) if change.added else (removed, added)
        out_of.discard(change.binding)
        into.add(change.binding)
    return added, removed


@runtime_checkable
class AclStore(Protocol):
    """A store that also keeps Kafka ACL bindings (both stores do), shared by every gateway on it. The version grows
    with every effective change, so a gateway polls :meth:`acl_version` and, when it moved, reads the changes since
    the version it holds (:meth:`acl_changes_since`), not the whole set: at Kafka's scale (100,000 ACLs) the whole
    set is hundreds of thousands of objects per read. Validation is the caller's (``quotaflow.admin.acls``)."""

    def acls(self) -> AclSnapshot: ...

    def acl_version(self) -> int: ...

    def acl_changes_since(self, version: int) -> list[AclChange] | None:
        """Every effective change with a version above ``version``, oldest first (applied in order to the set as of
        ``version`` they give the set as of the last one's version). None when the store no longer holds all of them
        (a compacted or bounded log, a reader that started from a checkpoint after ``version``): read :meth:`acls`."""
        ...

    def add_acls(self, bindings: Sequence[AclBinding]) -> int:
        """Add every binding (an existing one changes nothing); the ACL version after."""
        ...

    def remove_acls(self, bindings: Sequence[AclBinding]) -> int:
        """Remove every binding (an absent one changes nothing); the ACL version after."""
        ...


@dataclass(frozen=True, slots=True)
class ShadowSet:
    """A proposal tried on live traffic before it is enforced (``quotaflow shadow start``): changes over the enforced
    quotas, in ``client-quotas --alter --from-file``'s sense (a value sets a key, None removes it). The quotas a
    gateway evaluates in shadow are always the enforced ones *with these changes applied*, so an enforced change made
    while a shadow runs reaches both sets, and promoting applies exactly these changes."""

    id: int
    """Unique per start (the store's position when it started): the event log's ``shadow_id``."""
    name: str
    started_by: str
    started_ms: int
    changes: tuple[EntityChange, ...]
    outcome: str = "running"  # running | stopped | replaced | promoted
    ended_by: str | None = None
    ended_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Promotion:
    """One promote or rollback, kept in the store's history: the enforced keys it changed, with their values before
    (``previous``, None: the key was absent) and after (``applied``), written as one change-log batch that every
    gateway applies at once, at ``effective_ms``."""

    id: int
    """The store's position of the batch: its changes are the ones with ``first_seq <= seq <= last_seq``."""
    kind: str  # "promote" | "rollback"
    shadow_id: int
    shadow_name: str
    by: str
    at_ms: int
    effective_ms: int
    first_seq: int
    last_seq: int
    previous: tuple[EntityChange, ...]
    applied: tuple[EntityChange, ...]


@runtime_checkable
class ShadowStore(Protocol):
    """A store that also keeps the shadow set and the promotion history (both stores do), shared by every gateway
    on it. Gateways poll :meth:`shadow_version` and read :meth:`shadow` only when it moved. Validation is the
    caller's (``quotaflow.admin.shadow``)."""

    def shadow(self) -> ShadowSet | None:
        """The running shadow set, None when none runs."""
        ...

    def shadow_version(self) -> int:
        """Grows with every start, stop, promote and rollback."""
        ...

    def start_shadow(self, name: str, started_by: str, changes: Sequence[EntityChange]) -> ShadowSet:
        """Start a shadow set; one already running is replaced (kept in the history as ``replaced``)."""
        ...

    def stop_shadow(self, stopped_by: str) -> ShadowSet | None:
        """End the running shadow set without enforcing it; the one stopped, None when none ran."""
        ...

    def promote_shadow(self, by: str, effective_ms: int) -> Promotion:
        """Apply the running shadow's changes to the enforced quotas and end the shadow, in one change-log batch
        (one SQLite transaction; one record of the Kafka store's log) taking effect at ``effective_ms``; a
        :class:`~quotaflow.core.errors.ShadowStateError` when none runs."""
        ...

    def rollback(self, by: str, effective_ms: int, *, force: bool = False) -> Promotion:
        """Restore the keys the last promotion not rolled back yet changed to their values before it, in one batch
        likewise; refused (:class:`~quotaflow.core.errors.ShadowStateError`) when one of those keys no longer holds
        the value the promotion applied, unless ``force``."""
        ...

    def shadow_sets(self) -> list[ShadowSet]:
        """Every shadow set ever started, oldest first, with how it ended (a report can name one after it ended)."""
        ...

    def promotions(self) -> list[Promotion]:
        """Every promote and rollback, oldest first."""
        ...
