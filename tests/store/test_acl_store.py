"""ACL bindings in the stores: SQLite (a real file, two handles as two processes would hold), the Kafka store's
records applied to a view (the same code a ``kafka://`` reader runs), and ``store copy`` carrying them."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaflow.core.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.errors import StoreError
from quotaflow.store.copy import copy_store
from quotaflow.store.records import StoreView, acl_record
from quotaflow.store.sqlite import SqliteStore

READ_T = AclBinding(ResourcePattern(ResourceType.TOPIC, "t", PatternType.LITERAL),
                    AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW))
DENY_G = AclBinding(ResourcePattern(ResourceType.GROUP, "app-", PatternType.PREFIXED),
                    AccessControlEntry("User:*", "10.0.0.1", AclOperation.ALL, AclPermissionType.DENY))


def test_sqlite_acls_are_shared_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with SqliteStore(path) as a, SqliteStore(path) as b:
        assert a.acls().bindings == frozenset() and a.acl_version() == 0
        v1 = a.add_acls([READ_T, DENY_G])
        assert v1 == 2 and b.acl_version() == 2 and b.acls().bindings == {READ_T, DENY_G}
        assert a.add_acls([READ_T]) == v1  # an existing binding changes nothing, not even the version
        assert b.remove_acls([READ_T, READ_T]) == 3
        assert a.acls().bindings == {DENY_G} and a.acls().version == 3
        assert a.remove_acls([READ_T]) == 3  # absent: nothing changes
    with SqliteStore(path) as c:  # durable
        assert c.acls().bindings == {DENY_G}


def test_view_applies_acl_records_and_tombstones() -> None:
    view = StoreView()
    for offset, (key, value) in enumerate([acl_record(READ_T, 1), acl_record(DENY_G, 2), acl_record(READ_T, 3),
                                           acl_record(READ_T, None)]):
        view.apply(offset, key, value)
    assert view.acls == {DENY_G}
    assert view.acl_version == 4  # the tombstone at offset 3 was the last effective change
    view.apply(4, *acl_record(READ_T, None))  # removing an absent binding is no change
    assert view.acl_version == 4 and view.rejected == 0


def test_view_rejects_acl_records_create_acls_would_refuse() -> None:
    view = StoreView()
    bad = [
        AclBinding(ResourcePattern(ResourceType.ANY, "t", PatternType.LITERAL), READ_T.entry),
        AclBinding(ResourcePattern(ResourceType.TOPIC, "t", PatternType.MATCH), READ_T.entry),
        AclBinding(ResourcePattern(ResourceType.TOPIC, "", PatternType.LITERAL), READ_T.entry),
        AclBinding(READ_T.pattern, AccessControlEntry("alice", "*", AclOperation.READ, AclPermissionType.ALLOW)),
        AclBinding(READ_T.pattern, AccessControlEntry("User:a", "*", AclOperation.ANY, AclPermissionType.ALLOW)),
        AclBinding(ResourcePattern(ResourceType.CLUSTER, "other", PatternType.LITERAL), READ_T.entry),
    ]
    for offset, binding in enumerate(bad):
        view.apply(offset, *acl_record(binding, 1))
    view.apply(len(bad), b'["acl", 2, "t"]', b"{}")  # a key of the wrong shape
    view.apply(len(bad) + 1, b'["acl", 99, "t", 3, "User:a", "*", 3, 3]', b"{}")  # an undefined code
    assert view.acls == set() and view.rejected == len(bad) + 2


def test_copy_carries_acls_and_refuses_to_clobber(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "src.db") as src, SqliteStore(tmp_path / "dst.db") as dst:
        src.alter([(QuotaEntity(user="alice"), {"producer_byte_rate": 1000.0})])
        src.add_acls([READ_T, DENY_G])
        result = copy_store(src, dst)
        assert result.acls == 2 and dst.acls().bindings == {READ_T, DENY_G}
        src.remove_acls([DENY_G])
        with pytest.raises(StoreError, match="2 ACLs"):
            copy_store(src, dst)
        result = copy_store(src, dst, overwrite=True)
        assert result.removed_acls == 1 and dst.acls().bindings == {READ_T}


UNIVERSE = [READ_T, DENY_G, AclBinding(ResourcePattern(ResourceType.TOPIC, "t", PatternType.PREFIXED),
                                       AccessControlEntry("User:bob", "*", AclOperation.WRITE,
                                                          AclPermissionType.ALLOW))]


@given(ops=st.lists(st.tuples(st.integers(0, len(UNIVERSE) - 1), st.booleans()), max_size=30),
       drop_tombstones=st.booleans())
def test_compaction_keeps_the_acl_set(ops: list[tuple[int, bool]], drop_tombstones: bool) -> None:
    """Kafka's compaction keeps the last record per key (and eventually drops tombstones): replaying the survivors
    gives the same ACLs as the whole log."""
    log = [acl_record(UNIVERSE[i], None if remove else n) for n, (i, remove) in enumerate(ops)]
    whole = StoreView()
    for offset, (key, value) in enumerate(log):
        whole.apply(offset, key, value)
    last = {key: offset for offset, (key, _value) in enumerate(log)}
    survivors = [(o, k, v) for o, (k, v) in enumerate(log) if last[k] == o and not (drop_tombstones and v is None)]
    compacted = StoreView()
    for offset, key, value in survivors:
        compacted.apply(offset, key, value)
    assert compacted.acls == whole.acls
    assert whole.acls == {UNIVERSE[i] for i in {i for i, _ in ops} if not [r for j, r in ops if j == i][-1]}
