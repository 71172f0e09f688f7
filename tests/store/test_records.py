"""The Kafka store's records and view (pure): operations replay like the SQLite store, compaction keeps the view,
records that do not validate are skipped whole."""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.store import SqliteStore
from quotaflow.store.base import Credential, ScramCredential
from quotaflow.store.records import (
    StoreView,
    credential_record,
    credential_tombstone,
    credential_tombstones,
    quota_record,
    scram_record,
)

ENTITIES = [QuotaEntity(user="alice"), QuotaEntity(user=DEFAULT, client_id="c/1"), QuotaEntity(client_id=DEFAULT),
            QuotaEntity(ip="1.2.3.4")]
CLIENT_KEYS = ["producer_byte_rate", "consumer_byte_rate", "request_percentage"]
Record = tuple[bytes, bytes | None]


def _ops(entity: QuotaEntity) -> st.SearchStrategy[dict[str, float | None]]:
    keys = ["connection_creation_rate"] if entity.is_ip() else CLIENT_KEYS
    value = st.one_of(st.none(), st.sampled_from([1.0, 2.0, 1000.0]))
    return st.dictionaries(st.sampled_from(keys), value, min_size=1)


_entity_ops = st.sampled_from(ENTITIES).flatmap(lambda e: st.tuples(st.just(e), _ops(e)))
_credential_op = st.tuples(st.sampled_from(["u1", "u2"]), st.booleans())
_operations = st.lists(st.one_of(_entity_ops, _credential_op), max_size=40)


def _records(operations: list[object]) -> list[Record]:
    out: list[Record] = []
    for i, op in enumerate(operations):
        first, second = op  # type: ignore[misc]
        if isinstance(first, QuotaEntity):
            out.append(quota_record(first, second, ts_ms=i))
        elif second:
            out.append(credential_record(Credential(first, b"salt%d" % i, 1000 + i, b"key%d" % i)))
        else:
            out.append(credential_tombstone(first))
    return out


def _view(records: list[tuple[int, Record]]) -> StoreView:
    view = StoreView()
    for offset, (key, value) in records:
        view.apply(offset, key, value)
    return view


@settings(max_examples=200, deadline=None)
@given(_operations, st.booleans())
def test_compaction_keeps_the_view(operations: list[object], drop_tombstones: bool) -> None:
    """Kafka's compaction keeps the last record per key (and later drops tombstones): the survivors, replayed in
    order, give exactly the view of the whole log."""
    records = list(enumerate(_records(operations)))
    last = {key: offset for offset, (key, _value) in records}
    survivors = [(o, r) for o, r in records if last[r[0]] == o and not (drop_tombstones and r[1] is None)]
    full, compacted = _view(records), _view(survivors)
    assert compacted.entities == full.entities
    assert compacted.credentials == full.credentials
    assert full.rejected == compacted.rejected == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(_entity_ops, max_size=30))
def test_view_matches_the_sqlite_store(tmp_path_factory: object, alters: list[tuple[QuotaEntity, dict[str, float | None]]]) -> None:  # noqa: E501
    """Same alters, same data and the same effective change log (no-op sets and removals are not logged)."""
    path = Path(tmp_path_factory.mktemp("sq")) / "q.db"  # type: ignore[attr-defined]
    view = StoreView()
    with SqliteStore(path) as sqlite:
        for offset, (entity, ops) in enumerate(alters):
            sqlite.alter([(entity, ops)])
            view.apply(offset, *quota_record(entity, ops, ts_ms=0))
        assert view.snapshot().entities == sqlite.snapshot().entities
        assert [(c.entity, c.key, c.value) for c in view.changes_since(0)] == [
            (c.entity, c.key, c.value) for c in sqlite.changes_since(0)]
    assert view.snapshot().seq == view.position == len(alters)


def test_changes_since_uses_offsets() -> None:
    a, b = ENTITIES[0], ENTITIES[1]
    view = _view([(0, quota_record(a, {"producer_byte_rate": 1.0, "consumer_byte_rate": 2.0}, 5)),
                  (1, credential_record(Credential("u", b"s", 1, b"k"))),
                  (2, quota_record(b, {"request_percentage": math.nan}, 6))])
    assert [(c.seq, c.key) for c in view.changes_since(0)] == [
        (1, "producer_byte_rate"), (1, "consumer_byte_rate"), (3, "request_percentage")]
    assert [c.seq for c in view.changes_since(1)] == [3] and view.changes_since(3) == []
    assert math.isnan(view.entities[b]["request_percentage"])  # NaN survives the JSON encoding
    assert view.changes_since(0, limit=1)[0].ts_ms == 5


def test_invalid_records_are_skipped_whole() -> None:
    good = quota_record(ENTITIES[0], {"producer_byte_rate": 10.0}, 1)
    bad_records: list[Record] = [
        (b"not json", b"{}"),
        (b'["quota","users/alice",["producer_byte_rate"]]', None),
        quota_record(ENTITIES[0], {"producer_byte_rate": -5.0, "consumer_byte_rate": 1.0}, 1),  # > 0 required
        quota_record(ENTITIES[3], {"producer_byte_rate": 5.0}, 1),  # not a key an ip entity may hold
        quota_record(ENTITIES[0], {"request_percentage": 1.5e10}, 1),  # fine for a DOUBLE...
        (quota_record(ENTITIES[1], {"producer_byte_rate": 1.0}, 1)[0], good[1]),  # key and value disagree
        (b'["credential","eve"]', b'{"user":"mallory","salt":"","iterations":1,"hash":""}'),
        (b'["something","else"]', b"{}"),
    ]
    view = _view([(i, r) for i, r in enumerate([good, *bad_records])])
    assert view.rejected == len(bad_records) - 1  # every record but the valid DOUBLE one
    assert view.entities == {ENTITIES[0]: {"producer_byte_rate": 10.0, "request_percentage": 1.5e10}}
    assert view.credentials == {} and view.position == len(bad_records) + 1


def test_tombstones_tell_whether_a_user_existed() -> None:
    view = _view([(0, credential_record(Credential("u", b"s", 1, b"k"))), (1, credential_tombstone("u")),
                  (2, credential_tombstone("u"))])
    assert list(view.tombstones) == [(1, True), (2, False)] and view.credentials == {}


def test_scram_credentials_and_deleting_every_credential_of_a_user() -> None:
    sha256 = ScramCredential("u", "SCRAM-SHA-256", b"salt", b"stored", b"server", 4096)
    sha512 = ScramCredential("u", "SCRAM-SHA-512", b"salt2", b"stored2", b"server2", 4096)
    records = [credential_record(Credential("u", b"s", 1, b"k")), scram_record(sha256), scram_record(sha512),
               scram_record(ScramCredential("v", "SCRAM-SHA-256", b"a", b"b", b"c", 4096)),
               (b'["scram","w","SCRAM-MD5"]', b"{}")]
    view = _view(list(enumerate(records)))
    assert view.scram[("u", "SCRAM-SHA-512")] == sha512 and view.users() == ["u", "v"] and view.rejected == 1
    for offset, record in enumerate(credential_tombstones("u"), start=len(records)):
        view.apply(offset, *record)
    assert view.users() == ["v"] and view.credentials == {}
    assert [removed for _at, removed in view.tombstones] == [True, True, True]


@settings(max_examples=100, deadline=None)
@given(_operations, st.integers(1, 5))
def test_a_checkpoint_loads_into_the_view_it_was_taken_from(operations: list[object], chunk: int) -> None:
    """A reader starting from a checkpoint (issue 37.3) holds exactly the state of a reader of the whole log, with
    SCRAM credentials, NaN values and ACLs as well, however the state is split into chunks."""
    import pytest

    from quotaflow.core.acl import (
        AccessControlEntry,
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourcePattern,
        ResourceType,
    )
    from quotaflow.store import records as records_module
    from quotaflow.store.records import Manifest, acl_record

    grant = AclBinding(ResourcePattern(ResourceType.TOPIC, "t", PatternType.PREFIXED),
                       AccessControlEntry("User:a", "10.0.0.1", AclOperation.WRITE, AclPermissionType.DENY))
    log_ = [*_records(operations), quota_record(ENTITIES[0], {"request_percentage": math.nan}, 0),
            scram_record(ScramCredential("u3", "SCRAM-SHA-256", b"s", b"k" * 32, b"v" * 32, 4096)),
            acl_record(grant, 1)]
    full = _view(list(enumerate(log_)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(records_module, "CHUNK_RECORDS", chunk)
        chunks = full.state().chunks()
    loaded = StoreView()
    loaded.load_checkpoint(Manifest(full.position, full.acl_version, tuple(range(len(chunks)))),
                           [value for _key, value in chunks])
    assert str(loaded.snapshot()) == str(full.snapshot())  # NaN != NaN: compared as text
    assert (loaded.credentials, loaded.scram, loaded.acls) == (full.credentials, full.scram, full.acls)
    assert (loaded.position, loaded.acl_version, loaded.records_read) == (full.position, full.acl_version,
                                                                          len(chunks))
