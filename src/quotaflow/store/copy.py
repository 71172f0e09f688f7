"""Copy a whole store (quotas, credentials and ACLs) into another: SQLite to a Kafka cluster and back.

The destination ends up equal to the source: every entity's values, every credential (derived keys as stored,
never passwords), every ACL binding, and the running shadow set (started again in the destination, so the gateways
moved to it keep evaluating it; the shadow history stays with the source: its ids are positions in that store).
A destination that already holds anything is refused unless ``overwrite`` is given, so a typo cannot wipe a live
store.
"""

from __future__ import annotations

from dataclasses import dataclass

from quotaflow.core.errors import StoreError
from quotaflow.store.base import (
    AclStore,
    Credential,
    EntityChange,
    QuotaStore,
    ScramCredential,
    ScramStore,
    ShadowStore,
)
from quotaflow.store.scram import HASHES


@dataclass(frozen=True, slots=True)
class CopyResult:
    entities: int
    credentials: int
    removed_entities: int
    removed_credentials: int
    seq: int
    acls: int = 0
    removed_acls: int = 0
    shadow: str | None = None  # the running shadow set's name, started again in the destination


def copy_store(
    src: QuotaStore, dst: QuotaStore, *, overwrite: bool = False, dst_name: str = "destination"
) -> CopyResult:
    """Make ``dst`` hold exactly ``src``'s quotas and credentials (each entity all-or-nothing)."""
    snapshot = src.snapshot()
    users = src.list_credentials()
    credentials: list[Credential] = []
    scram: list[ScramCredential] = []
    for user in users:
        credential = src.get_credential(user)
        if credential is not None:
            credentials.append(credential)
        if isinstance(src, ScramStore):
            scram += [c for m in sorted(HASHES) if (c := src.get_scram_credential(user, m)) is not None]
    if scram and not isinstance(dst, ScramStore):
        raise StoreError(f"{dst_name} keeps PLAIN credentials only; the source has SCRAM credentials")
    acls = src.acls().bindings if isinstance(src, AclStore) else frozenset()
    if acls and not isinstance(dst, AclStore):
        raise StoreError(f"{dst_name} keeps no ACLs; the source has {len(acls)}")
    shadow = src.shadow() if isinstance(src, ShadowStore) else None
    if shadow is not None and not isinstance(dst, ShadowStore):
        raise StoreError(f"{dst_name} keeps no shadow sets; the source runs {shadow.name!r}")
    existing = dst.snapshot().entities
    existing_users = set(dst.list_credentials())
    existing_acls = dst.acls().bindings if isinstance(dst, AclStore) else frozenset()
    if (existing or existing_users or existing_acls) and not overwrite:
        raise StoreError(f"{dst_name} is not empty ({len(existing)} entities, {len(existing_users)} users, "
                         f"{len(existing_acls)} ACLs); --overwrite replaces its contents with the source's")
    changes: list[EntityChange] = []
    for entity, values in snapshot.entities.items():
        ops: dict[str, float | None] = dict.fromkeys(existing.get(entity, {}))
        ops.update(values)
        changes.append((entity, ops))
    stale = [e for e in existing if e not in snapshot.entities]
    changes.extend((entity, dict.fromkeys(existing[entity])) for entity in stale)
    seq = dst.alter(changes) if changes else dst.last_seq()
    for user in sorted(existing_users & set(users)):  # drop what the source does not have for this user
        dst.delete_credential(user)
    for credential in credentials:
        dst.put_credential(credential)
    for scram_credential in scram:
        assert isinstance(dst, ScramStore)
        dst.put_scram_credential(scram_credential)
    gone = existing_users - set(users)
    for user in sorted(gone):
        dst.delete_credential(user)
    stale_acls = existing_acls - acls
    if isinstance(dst, AclStore):
        if stale_acls:
            dst.remove_acls(sorted(stale_acls, key=lambda b: b.sort_key()))
        if acls - existing_acls:
            dst.add_acls(sorted(acls - existing_acls, key=lambda b: b.sort_key()))
    if isinstance(dst, ShadowStore):
        if shadow is not None:
            dst.start_shadow(shadow.name, shadow.started_by, shadow.changes)
        elif overwrite:
            dst.stop_shadow("store copy")  # the source runs none: neither does its copy
    return CopyResult(len(snapshot.entities), len(users), len(stale), len(gone), seq, len(acls), len(stale_acls),
                      None if shadow is None else shadow.name)
