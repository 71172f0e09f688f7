"""Shadow sets and promotions in the SQLite store (real files; a second handle is what another process holds):
the shared contract (``tests/shadow_contract.py``), the migration from a store made before shadows existed, and
promote / rollback as one transaction each."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import shadow_contract as contract
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.errors import StoreError
from quotaflow.store.migrations import MIGRATIONS, SCHEMA_VERSION
from quotaflow.store.sqlite import SqliteStore


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "q.db"


@pytest.fixture
def store(path: Path) -> SqliteStore:
    s = SqliteStore(path)
    yield s
    s.close()


def test_start_status_stop_replace(store: SqliteStore, path: Path) -> None:
    contract.start_status_stop_replace(store, lambda: SqliteStore(path))


def test_promote_and_rollback(store: SqliteStore, path: Path) -> None:
    contract.promote_and_rollback(store, lambda: SqliteStore(path), one_seq=False)


def test_rollbacks_walk_back_and_force(store: SqliteStore) -> None:
    contract.rollbacks_walk_back_and_force(store)


def test_promotion_is_atomic_to_pollers(store: SqliteStore, path: Path) -> None:
    contract.promotion_is_atomic_to_pollers(store, lambda: SqliteStore(path))


def test_racing_writers(store: SqliteStore, path: Path) -> None:
    contract.racing_writers(store, lambda: SqliteStore(path))


def test_history_survives_reopening(path: Path) -> None:
    with SqliteStore(path) as s:
        s.start_shadow("kept", "ann", [(contract.ALICE, {"producer_byte_rate": 1.0})])
        promotion = s.promote_shadow("ann", 42)
        sets, version = s.shadow_sets(), s.shadow_version()
    with SqliteStore(path) as s:
        assert s.shadow_sets() == sets and s.promotions() == [promotion] and s.shadow_version() == version


def test_a_store_from_before_shadows_is_migrated(path: Path) -> None:
    db = sqlite3.connect(path)
    for number, migration in enumerate(MIGRATIONS[:3], start=1):
        db.executescript(migration)
        db.execute(f"PRAGMA user_version = {number}")
    db.execute("INSERT INTO quotas (path, key, value) VALUES ('users/alice', 'producer_byte_rate', 5.0)")
    db.commit()
    db.close()
    with SqliteStore(path) as s:
        assert s.schema_version == SCHEMA_VERSION >= 4
        assert s.shadow() is None and s.shadow_version() == 0 and s.promotions() == []
        assert s.get(QuotaEntity(user="alice")) == {"producer_byte_rate": 5.0}


def test_promote_is_one_transaction(store: SqliteStore, path: Path) -> None:
    """A failure in the middle of a promotion (the history row cannot be written) leaves nothing of it: no quota,
    no change-log entry, the shadow still running."""
    contract._seed(store)
    shadow = store.start_shadow("doomed", "ann", contract.PROPOSAL)
    seq, version = store.last_seq(), store.shadow_version()
    with sqlite3.connect(path) as db:  # another process's schema damage, as a full disk would fail that INSERT
        db.execute("CREATE TRIGGER no_history BEFORE INSERT ON promotions BEGIN SELECT RAISE(ABORT, 'disk'); END")
    with pytest.raises(StoreError, match="disk"):
        store.promote_shadow("ann", 0)
    assert store.last_seq() == seq and store.shadow_version() == version and store.shadow() == shadow
    assert store.get(contract.ALICE) == {"producer_byte_rate": 1000.0, "consumer_byte_rate": 2000.0}
    assert store.changes_since(seq) == [] and store.promotions() == []


def test_rollback_is_one_transaction(store: SqliteStore, path: Path) -> None:
    contract._seed(store)
    store.start_shadow("p", "ann", contract.PROPOSAL)
    store.promote_shadow("ann", 0)
    after = store.snapshot().entities
    seq = store.last_seq()
    with sqlite3.connect(path) as db:
        db.execute("CREATE TRIGGER no_history BEFORE INSERT ON promotions BEGIN SELECT RAISE(ABORT, 'disk'); END")
    with pytest.raises(StoreError, match="disk"):
        store.rollback("ann", 0)
    assert store.snapshot().entities == after and store.last_seq() == seq and len(store.promotions()) == 1


def test_store_copy_carries_the_running_shadow_set(tmp_path: Path) -> None:
    from quotaflow.store.copy import copy_store

    with SqliteStore(tmp_path / "src.db") as src, SqliteStore(tmp_path / "dst.db") as dst:
        src.alter([(contract.ALICE, {"producer_byte_rate": 1.0})])
        running = src.start_shadow("moving", "ann", contract.PROPOSAL)
        dst.start_shadow("stale", "bob", contract.PROPOSAL[:1])
        dst.alter([(contract.BOB, {"producer_byte_rate": 2.0})])
        result = copy_store(src, dst, overwrite=True)
        assert result.shadow == "moving"
        copied = dst.shadow()
        assert copied is not None and (copied.name, copied.started_by, copied.changes) == (
            running.name, running.started_by, running.changes)
        src.stop_shadow("ann")
        assert copy_store(src, dst, overwrite=True).shadow is None and dst.shadow() is None
