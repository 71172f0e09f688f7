"""``quotaflow.admin.shadow`` over a real SQLite store: the proposal validated by the code ``client-quotas --alter
--from-file`` runs, all-or-nothing; ``effective_ms`` = now + grace; the JSON forms round-trip to a proposal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotaflow.admin import Admin
from quotaflow.admin import shadow as shadows
from quotaflow.admin.batch import apply, read_proposal
from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.errors import CommandError, ShadowStateError
from quotaflow.store.sqlite import SqliteStore

ALICE = QuotaEntity(user="alice")


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    s = SqliteStore(tmp_path / "q.db")
    yield s
    s.close()


def _file(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "proposal.json"
    path.write_text(json.dumps(doc))
    return path


def test_invalid_entities_refuse_the_whole_set_with_client_quotas_messages(store: SqliteStore,
                                                                          tmp_path: Path) -> None:
    doc = [{"entity": {"user": "alice"}, "values": {"producer_byte_rate": 2000}},
           {"entity": {"user": "bob"}, "values": {"producer_byte_rate": 0}},
           {"entity": {"ip": "10.0.0.1"}, "values": {"consumer_byte_rate": 5}},
           {"entity": {"user": "alice"}, "values": {"request_percentage": 5}}]  # a duplicate entity
    path = _file(tmp_path, doc)
    with pytest.raises(CommandError) as refused:
        shadows.start_from_file(store, path, "bad", "ann")
    assert store.shadow() is None and store.shadow_sets() == []
    # the very messages client-quotas --alter --from-file gives each entity of the same file
    failed = {str(c.result.error.message) for c in apply(Admin(store), read_proposal(path), validate_only=True)
              if c.result is not None and not c.result.ok}
    assert len(failed) == 3
    for message in failed:
        assert message in str(refused.value)
    assert str(refused.value).startswith(f"{path}: 3 of 3 entities are invalid")


def test_unreadable_or_malformed_files(store: SqliteStore, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="Cannot read"):
        shadows.start_from_file(store, tmp_path / "missing.json", "x", "ann")
    with pytest.raises(CommandError, match=r"entry 0: value of producer_byte_rate must be a number or null"):
        shadows.start_from_file(store, _file(tmp_path, [{"entity": {"user": "a"},
                                                         "values": {"producer_byte_rate": "fast"}}]), "x", "ann")
    with pytest.raises(CommandError, match="needs a name"):
        shadows.start_from_file(store, _file(tmp_path, [{"entity": {"user": "a"},
                                                         "values": {"producer_byte_rate": 1}}]), " ", "ann")


def test_any_entity_type_and_key(store: SqliteStore, tmp_path: Path) -> None:
    doc = [{"entity": {"user": None}, "values": {"producer_byte_rate": 1e6}},
           {"entity": {"user": "alice", "client-id": None}, "values": {"consumer_byte_rate": 2e6}},
           {"entity": {"client-id-prefix": "etl-"}, "values": {"request_percentage": 30}},
           {"entity": {"ip": "10.0.0.0/8"}, "values": {"connection_creation_rate": 5}},
           {"entity": {"user": "alice"}, "values": {"controller_mutation_rate": 10, "producer_byte_rate": None}}]
    started = shadows.start_from_file(store, _file(tmp_path, doc), "all kinds", "ann")
    assert [e for e, _ in started.changes] == [
        QuotaEntity(user=DEFAULT), QuotaEntity(user="alice", client_id=DEFAULT),
        QuotaEntity(client_id_prefix="etl-"), QuotaEntity(ip="10.0.0.0/8"), ALICE]
    assert shadows.changes_json(started.changes) == [
        {"entity": e, "values": {k: (None if v is None else float(v)) for k, v in vs.items()}}
        for e, vs in ((d["entity"], d["values"]) for d in doc)]


def test_promote_takes_effect_now_plus_grace(store: SqliteStore) -> None:
    store.start_shadow("s", "ann", [(ALICE, {"producer_byte_rate": 1.0})])
    with pytest.raises(CommandError, match="--in must be between 0 and"):
        shadows.promote(store, "ann", -1, clock_ms=lambda: 1_000)
    promotion = shadows.promote(store, "ann", 7.5, clock_ms=lambda: 1_000)
    assert promotion.effective_ms == 8_500 and store.promotions()[0].effective_ms == 8_500
    rolled = shadows.rollback(store, "bob", 0, clock_ms=lambda: 2_000)
    assert rolled.effective_ms == 2_000 and rolled.by == "bob"


def test_stop_without_a_running_set_is_an_error(store: SqliteStore) -> None:
    with pytest.raises(ShadowStateError, match="no shadow set is running"):
        shadows.stop(store, "ann")
