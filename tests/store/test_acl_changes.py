"""The stores' ACL delta (``AclStore.acl_changes_since``): exactly the effective changes after a version, so a gateway
follows an ACL change without reading the whole set (issue 37.3). SQLite through two handles (as two processes), the
Kafka store's view through the records it applies (the code a ``kafka://`` reader runs; the broker round trip is in
tests/gateway/test_acl_delta.py). Whenever a store cannot give the whole delta it says so (None), never a part."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
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
from quotaflow.store import records
from quotaflow.store.base import AclChange, net_acl_change
from quotaflow.store.records import Manifest, StoreView, acl_record
from quotaflow.store.sqlite import SqliteStore

UNIVERSE = [AclBinding(ResourcePattern(rt, name, pt), AccessControlEntry(who, "*", op, AclPermissionType.ALLOW))
            for rt, name, pt, who, op in [
                (ResourceType.TOPIC, "t", PatternType.LITERAL, "User:alice", AclOperation.READ),
                (ResourceType.TOPIC, "t", PatternType.PREFIXED, "User:bob", AclOperation.WRITE),
                (ResourceType.GROUP, "g", PatternType.LITERAL, "User:*", AclOperation.ALL),
                (ResourceType.TOPIC, "*", PatternType.LITERAL, "User:carol", AclOperation.DESCRIBE),
                (ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:dave", AclOperation.ALTER),
            ]]
# one store call per step: add (True) or remove (False) these bindings
steps = st.lists(st.tuples(st.booleans(), st.lists(st.sampled_from(UNIVERSE), min_size=1, max_size=3)), max_size=20)


def replay(start: frozenset[AclBinding], changes: list[AclChange]) -> set[AclBinding]:
    """The set ``changes`` lead to, one by one, each checked to be effective (an add of an absent binding...)."""
    held = set(start)
    for change in changes:
        assert (change.binding in held) != change.added, change
        (held.add if change.added else held.discard)(change.binding)
    return held


@settings(max_examples=60, deadline=None)
@given(steps)
def test_sqlite_delta_is_exactly_the_changes(tmp_path_factory: pytest.TempPathFactory,
                                             ops: list[tuple[bool, list[AclBinding]]]) -> None:
    """From every version seen along the way, the delta read by another handle, applied to the set as of that
    version, is the set now; the versions are consecutive and end at the current one."""
    path = tmp_path_factory.mktemp("acl") / "q.db"
    with SqliteStore(path) as writer, SqliteStore(path) as reader:
        seen = [reader.acls()]
        for add, bindings in ops:
            (writer.add_acls if add else writer.remove_acls)(bindings)
            seen.append(reader.acls())
        now = reader.acls()
        for snapshot in seen:
            changes = reader.acl_changes_since(snapshot.version)
            assert changes is not None
            assert [c.version for c in changes] == list(range(snapshot.version + 1, now.version + 1))
            assert replay(snapshot.bindings, changes) == now.bindings
            added, removed = net_acl_change(changes)
            assert (snapshot.bindings - removed) | added == now.bindings


def test_sqlite_says_when_it_cannot_give_the_whole_delta(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "q.db") as store:
        store.add_acls(UNIVERSE[:3])
        store.remove_acls(UNIVERSE[:1])
        assert store.acl_changes_since(4) == []
        assert store.acl_changes_since(5) is None  # a version this store never reached (another store's)
        assert [(c.version, c.binding, c.added) for c in store.acl_changes_since(2) or []] == [
            (3, UNIVERSE[2], True), (4, UNIVERSE[0], False)]
        store._db.execute("DELETE FROM acl_changes WHERE seq = 3")  # a hole: a partial delta would be wrong
        assert store.acl_changes_since(2) is None
        assert store.acl_changes_since(3) is not None


def view_of(log: list[tuple[bytes, bytes | None]]) -> StoreView:
    view = StoreView()
    for offset, (key, value) in enumerate(log):
        view.apply(offset, key, value)
    return view


@settings(max_examples=60, deadline=None)
@given(steps)
def test_view_delta_is_exactly_the_changes(ops: list[tuple[bool, list[AclBinding]]]) -> None:
    """The Kafka store's view: its ACL version is an offset + 1, so versions are not consecutive; from every
    version the view held along the log, the delta leads from that set to the set now."""
    log = [acl_record(b, n if add else None) for n, (add, bindings) in enumerate(ops) for b in bindings]
    view = StoreView()
    seen = [(0, frozenset[AclBinding]())]
    for offset, (key, value) in enumerate(log):
        view.apply(offset, key, value)
        seen.append((view.acl_version, frozenset(view.acls)))
    for version, held in seen:
        changes = view.acl_changes_since(version)
        assert changes is not None
        assert all(c.version > version for c in changes)
        assert [c.version for c in changes] == sorted({c.version for c in changes})
        assert replay(held, changes) == view.acls
    assert view.acl_changes_since(view.acl_version + 1) is None


def test_view_keeps_a_bounded_log_and_says_when_a_poller_is_behind_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "ACL_CHANGE_LOG", 4)
    many = [AclBinding(ResourcePattern(ResourceType.TOPIC, f"t{i}", PatternType.LITERAL), UNIVERSE[0].entry)
            for i in range(10)]
    view = view_of([acl_record(b, 1) for b in many])
    assert len(view.acl_changes) == 4 and view.acl_version == 10
    assert view.acl_changes_since(6) == [AclChange(v, many[v - 1], True) for v in range(7, 11)]
    assert view.acl_changes_since(5) is None  # the change to version 6 fell out of the log


def test_a_view_started_from_a_checkpoint_knows_no_change_before_it() -> None:
    whole = view_of([acl_record(b, 1) for b in UNIVERSE])
    chunks = [value for _key, value in whole.state().chunks()]
    view = StoreView()
    view.load_checkpoint(Manifest(whole.position, whole.acl_version, tuple(range(len(chunks)))), chunks)
    assert view.acls == whole.acls
    assert view.acl_changes_since(0) is None and view.acl_changes_since(whole.acl_version - 1) is None
    assert view.acl_changes_since(whole.acl_version) == []
    view.apply(whole.position, *acl_record(UNIVERSE[0], None))
    assert view.acl_changes_since(whole.acl_version) == [AclChange(whole.position + 1, UNIVERSE[0], False)]
