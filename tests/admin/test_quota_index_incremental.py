"""The resolve index kept current change by change: equal to a full rebuild after any change sequence, and the work
per change is the change (the old index was rebuilt from a whole snapshot on every resolve)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from quotaflow.admin import Admin, Alteration, QuotaIndex
from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.keys import CLIENT_QUOTA_KEYS, CONNECTION_CREATION_RATE
from quotaflow.store.base import Change, Snapshot
from quotaflow.store.sqlite import SqliteStore

USERS: list[Any] = ["alice", "a b", "bob", DEFAULT]
CLIENTS: list[Any] = ["app", "app-1", "c@#", DEFAULT]
PREFIXES = ["a", "ap", "app-"]
IPS: list[Any] = ["10.0.0.1", "::1", "::0001", "10.1.2.3", DEFAULT, "10.0.0.0/8", "10.0.0.0/16", "::/0", "0::/0"]
KEYS = [*sorted(CLIENT_QUOTA_KEYS), CONNECTION_CREATION_RATE]

client_entities = st.one_of(
    st.builds(lambda u: QuotaEntity(user=u), st.sampled_from(USERS)),
    st.builds(lambda c: QuotaEntity(client_id=c), st.sampled_from(CLIENTS)),
    st.builds(lambda u, c: QuotaEntity(user=u, client_id=c), st.sampled_from(USERS), st.sampled_from(CLIENTS)),
    st.builds(lambda p: QuotaEntity(client_id_prefix=p), st.sampled_from(PREFIXES)),
)
ip_entities = st.builds(lambda ip: QuotaEntity(ip=ip), st.sampled_from(IPS))
# (entity, key, value or None = remove)
changes = st.lists(
    st.tuples(st.one_of(client_entities, ip_entities), st.sampled_from(KEYS),
              st.one_of(st.none(), st.sampled_from([1.0, 2.0, 1e6]))),
    max_size=60,
)


def replay(ops: list[tuple[QuotaEntity, str, float | None]]) -> tuple[list[Change], Snapshot]:
    """The store's change log for ``ops`` (only effective changes are logged, as both stores do) and the snapshot
    it ends in, path-ordered as the SQLite store reads it."""
    state: dict[QuotaEntity, dict[str, float]] = {}
    log: list[Change] = []
    for entity, key, value in ops:
        values = state.setdefault(entity, {})
        if value is None:
            if key not in values:
                continue
            del values[key]
        else:
            if values.get(key) == value:
                continue
            values[key] = value
        if not values:
            del state[entity]
        log.append(Change(len(log) + 1, 0, entity, key, value))
    ordered = {e: state[e] for e in sorted(state, key=lambda e: e.path)}
    return log, Snapshot(len(log), ordered)


def assert_same(a: QuotaIndex, b: QuotaIndex) -> None:
    assert a.seq == b.seq
    for key in CLIENT_QUOTA_KEYS:
        assert a.mask(key) == b.mask(key), key
    for user in ["alice", "a b", "bob", "carol", ""]:
        for client in ["app", "app-1", "app-2", "c@#", "b", ""]:
            assert a.resolve(user, client) == b.resolve(user, client), (user, client)
    for ip in ["10.0.0.1", "::1", "10.1.2.3", "10.0.9.9", "10.2.0.1", "192.168.0.1", "::2"]:
        assert a.resolve_ip(ip) == b.resolve_ip(ip), ip


@settings(max_examples=300, deadline=None)
@given(changes, st.integers(0, 60))
@example([(QuotaEntity(ip="::1"), CONNECTION_CREATION_RATE, 1.0),  # one address stored twice
          (QuotaEntity(ip="::0001"), CONNECTION_CREATION_RATE, 2.0)], 0)
@example([(QuotaEntity(ip="::/0"), CONNECTION_CREATION_RATE, 1.0),  # one range stored twice, then one removed
          (QuotaEntity(ip="0::/0"), CONNECTION_CREATION_RATE, 2.0),
          (QuotaEntity(ip="::/0"), CONNECTION_CREATION_RATE, None)], 1)
def test_incremental_index_equals_full_rebuild(ops: list[tuple[QuotaEntity, str, float | None]], split: int) -> None:
    """Start from the snapshot at some point of the log, apply the rest change by change: the same answers as an
    index built from the final snapshot (precedence, quota-ids, masks, prefixes, ranges, ip aliases)."""
    log, final = replay(ops)
    _, head = replay(ops[:split])  # its log is the first head.seq changes of the whole one
    incremental = QuotaIndex(head)
    incremental.apply(log)  # the changes up to head.seq are skipped, as a poll from that seq would not read them
    assert_same(incremental, QuotaIndex(final))


@settings(max_examples=100, deadline=None)
@given(changes)
def test_changes_applied_twice_change_nothing(ops: list[tuple[QuotaEntity, str, float | None]]) -> None:
    """A poll that re-reads changes already applied (two readers of one log) leaves the index as it was."""
    log, final = replay(ops)
    index = QuotaIndex(Snapshot(0, {}))
    index.apply(log)
    index.apply(log)
    assert_same(index, QuotaIndex(final))


class CountingStore:
    """A real SQLite store that counts what is read from it."""

    def __init__(self, store: SqliteStore) -> None:
        self.inner = store
        self.snapshots = 0
        self.changes_read = 0

    def snapshot(self) -> Snapshot:
        self.snapshots += 1
        return self.inner.snapshot()

    def changes_since(self, seq: int, limit: int | None = None) -> list[Change]:
        out = self.inner.changes_since(seq, limit)
        self.changes_read += len(out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def counted(tmp_path: Path) -> Iterator[tuple[Admin, CountingStore]]:
    store = CountingStore(SqliteStore(tmp_path / "q.db"))
    admin = Admin(store)  # type: ignore[arg-type]
    yield admin, store
    admin.close()


def test_resolve_work_is_per_change_not_per_call(counted: tuple[Admin, CountingStore]) -> None:
    """With 2,000 entities stored, a resolve after one alteration reads that one change and touches one entry; a
    resolve with no change in between reads nothing. (Before: every resolve read and indexed the whole store.)"""
    admin, store = counted
    admin.alter([Alteration.of(QuotaEntity(user=f"u{i}", client_id=f"c{i}"), {"producer_byte_rate": 1000.0 + i})
                  for i in range(2000)])
    assert admin.resolve("u7", "c7").quotas["producer_byte_rate"].value == 1007.0
    built = admin._live
    assert built is not None
    snapshots, touched = store.snapshots, built.touched
    for i in range(20):
        admin.alter([Alteration.of(QuotaEntity(user="u7", client_id="c7"), {"producer_byte_rate": 5.0 + i})])
        assert admin.resolve("u7", "c7").quotas["producer_byte_rate"].value == 5.0 + i
        assert admin.resolve("u8", "c8").quotas["producer_byte_rate"].value == 1008.0
    assert store.snapshots == snapshots, "a resolve read the whole store again"
    assert built.touched - touched == 20, "more index entries were written than changes made"


def test_resolve_sees_a_removed_default(counted: tuple[Admin, CountingStore]) -> None:
    """A default added then removed: the mask bit and the fallback go with it."""
    admin, _store = counted
    admin.alter([Alteration.of(QuotaEntity(user="u"), {"producer_byte_rate": 10.0})])
    assert admin.resolve("v", "c").quotas["producer_byte_rate"].unlimited
    admin.alter([Alteration.of(QuotaEntity(user=DEFAULT), {"producer_byte_rate": 20.0})])
    assert admin.resolve("v", "c").quotas["producer_byte_rate"].value == 20.0
    admin.alter([Alteration.of(QuotaEntity(user=DEFAULT), {"producer_byte_rate": None})])
    assert admin.resolve("v", "c").quotas["producer_byte_rate"].unlimited
    assert admin.resolve("u", "c").quotas["producer_byte_rate"].value == 10.0


def test_changes_sharing_one_seq_all_apply() -> None:
    """A ``kafka://`` record is one seq for all its changes (an entity's keys, a whole promotion): every one of them
    reaches the index, not only the first (the old bound was the last change applied)."""
    a, b = QuotaEntity(user="a"), QuotaEntity(user="b")
    index = QuotaIndex()
    index.apply([Change(5, 0, a, "producer_byte_rate", 10.0), Change(5, 0, a, "consumer_byte_rate", 11.0),
                 Change(5, 0, b, "producer_byte_rate", 20.0)])
    assert index.seq == 5
    assert index.resolve("b", "x").quotas["producer_byte_rate"].value == 20.0
    assert index.resolve("a", "x").quotas["consumer_byte_rate"].value == 11.0
    index.apply([Change(5, 0, b, "producer_byte_rate", None)])  # already applied: skipped
    assert index.resolve("b", "x").quotas["producer_byte_rate"].value == 20.0
