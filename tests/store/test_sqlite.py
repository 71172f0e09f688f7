"""The SQLite store: schema migrations, alter semantics, change log, credentials, several writers, SIGKILL."""

from __future__ import annotations

import math
import multiprocessing
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.errors import StoreError
from quotaflow.store import STORE_ENV, Credential, SqliteStore, open_store, store_path
from quotaflow.store.migrations import SCHEMA_VERSION

ALICE = QuotaEntity(user="alice")
PAIR = QuotaEntity(user="user with spaces", client_id="c1")
IP = QuotaEntity(ip="1.2.3.4")


def replay(store: SqliteStore) -> dict[str, dict[str, float]]:
    """Rebuild the data from the change log alone."""
    out: dict[str, dict[str, float]] = {}
    for c in store.changes_since(0):
        values = out.setdefault(c.path, {})
        if c.value is None:
            values.pop(c.key, None)
            if not values:
                out.pop(c.path)
        else:
            values[c.key] = c.value
    return out


def data(store: SqliteStore) -> dict[str, dict[str, float]]:
    return {e.path: v for e, v in store.snapshot().entities.items()}


def test_fresh_store_is_migrated_and_reopens(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "q.db"
    with SqliteStore(path) as s:
        assert s.schema_version == SCHEMA_VERSION
        assert s.last_seq() == 0
        s.alter([(ALICE, {"producer_byte_rate": 100.0})])
    with SqliteStore(path) as s:
        assert s.schema_version == SCHEMA_VERSION
        assert s.get(ALICE) == {"producer_byte_rate": 100.0}
        assert s.last_seq() == 1
        mode = s._db.execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer than this quotaflow"):
        SqliteStore(path)


def test_a_file_that_is_not_a_store_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    path.write_bytes(b"not a database, just bytes " * 100)
    with pytest.raises(StoreError, match="cannot open quota store") as info:
        SqliteStore(path)
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


def test_alter_logs_only_effective_changes(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "q.db", clock_ms=lambda: 1234) as s:
        assert s.alter([(PAIR, {"producer_byte_rate": 10.0, "consumer_byte_rate": 20.0})]) == 2
        assert s.alter([(PAIR, {"producer_byte_rate": 10.0, "request_percentage": None})]) == 2  # no-ops
        assert s.alter([(PAIR, {"producer_byte_rate": None}), (IP, {"connection_creation_rate": 5.0})]) == 4
        changes = s.changes_since(0)
        assert [(c.seq, c.ts_ms, c.path, c.key, c.value) for c in changes] == [
            (1, 1234, "users/user%20with%20spaces/clients/c1", "producer_byte_rate", 10.0),
            (2, 1234, "users/user%20with%20spaces/clients/c1", "consumer_byte_rate", 20.0),
            (3, 1234, "users/user%20with%20spaces/clients/c1", "producer_byte_rate", None),
            (4, 1234, "ips/1.2.3.4", "connection_creation_rate", 5.0),
        ]
        assert changes[0].entity == PAIR
        assert [c.seq for c in s.changes_since(2, limit=1)] == [3]
        s.alter([(PAIR, {"consumer_byte_rate": None})])
        assert PAIR not in s.snapshot().entities  # the last key removed: the entity is gone
        assert s.get(PAIR) == {}
        assert data(s) == replay(s) == {"ips/1.2.3.4": {"connection_creation_rate": 5.0}}


def test_defaults_and_literal_default_are_distinct(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "q.db") as s:
        default_client = QuotaEntity(client_id=DEFAULT)
        literal = QuotaEntity(client_id="<default>")
        s.alter([(default_client, {"producer_byte_rate": 1.0}), (literal, {"producer_byte_rate": 2.0})])
        expected = {default_client: {"producer_byte_rate": 1.0}, literal: {"producer_byte_rate": 2.0}}
        assert s.snapshot().entities == expected
        assert {c.path for c in s.changes_since(0)} == {"clients/<default>", "clients/%3Cdefault%3E"}


def test_non_finite_values_round_trip(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "q.db") as s:
        s.alter([(ALICE, {"request_percentage": math.nan, "controller_mutation_rate": math.inf})])
        got = s.get(ALICE)
        assert math.isnan(got["request_percentage"]) and got["controller_mutation_rate"] == math.inf
        s.alter([(ALICE, {"request_percentage": math.nan})])  # NaN equals NaN for "unchanged"
        assert s.last_seq() == 2
        assert math.isnan(s.changes_since(0)[0].value or 0.0)


def test_snapshot_seq_matches_data(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "q.db") as s:
        s.alter([(QuotaEntity(user=f"u{i}"), {"producer_byte_rate": float(i + 1)}) for i in range(5)])
        snap = s.snapshot()
        assert snap.seq == 5 and len(snap.entities) == 5


def test_credentials(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "q.db") as s:
        cred = Credential("alice", b"salt", 1000, b"hash")
        assert s.get_credential("alice") is None
        s.put_credential(cred)
        s.put_credential(Credential("bob", b"s2", 10, b"h2"))
        assert s.get_credential("alice") == cred
        s.put_credential(Credential("alice", b"new", 2000, b"h3"))
        assert s.get_credential("alice") == Credential("alice", b"new", 2000, b"h3")
        assert s.list_credentials() == ["alice", "bob"]
        assert s.delete_credential("alice") and not s.delete_credential("alice")
        assert s.list_credentials() == ["bob"]


def test_open_store_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORE_ENV, raising=False)
    assert store_path() == Path("quotaflow.db")
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "env.db"))
    assert store_path() == tmp_path / "env.db"
    assert store_path(tmp_path / "x.db") == tmp_path / "x.db"
    with open_store() as s:
        assert s.path == tmp_path / "env.db"


def _writer(path: str, worker: int, count: int) -> None:
    with SqliteStore(path) as s:
        for i in range(count):
            s.alter([(QuotaEntity(user=f"w{worker}", client_id=f"c{i}"), {"producer_byte_rate": float(i + 1)})])


def test_several_processes_write_at_once(tmp_path: Path) -> None:
    path = str(tmp_path / "q.db")
    SqliteStore(path).close()
    workers, count = 4, 40
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, count)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with SqliteStore(path) as s:
        seqs = [c.seq for c in s.changes_since(0)]
        assert seqs == list(range(1, workers * count + 1))
        assert len(s.snapshot().entities) == workers * count
        assert data(s) == replay(s)


CHILD = textwrap.dedent(
    """
    import sys
    from quotaflow.core.entities import QuotaEntity
    from quotaflow.store.sqlite import SqliteStore

    store = SqliteStore(sys.argv[1])
    entities = [QuotaEntity(user=f"user-{i}", client_id="app") for i in range(int(sys.argv[2]))]
    print("ready", flush=True)
    round_ = 1
    while True:  # every call rewrites every entity: one multi-entity alter per round
        store.alter([(e, {"producer_byte_rate": float(round_), "consumer_byte_rate": float(round_)})
                     for e in entities])
        round_ += 1
    """
)


@pytest.mark.parametrize("attempt", range(3))
def test_sigkill_mid_alter_leaves_entities_all_or_nothing(tmp_path: Path, attempt: int) -> None:
    path = tmp_path / "q.db"
    n = 400
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(n)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(random.Random(attempt).uniform(0.2, 0.8))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    with SqliteStore(path) as s:
        snap = s.snapshot()
        rounds = set()
        for values in snap.entities.values():
            assert values["producer_byte_rate"] == values["consumer_byte_rate"]  # each entity all-or-nothing
            rounds.add(values["producer_byte_rate"])
        # the whole call is one transaction: either no entity yet, or all of them at the same round
        assert len(snap.entities) in (0, n)
        assert len(rounds) <= 1
        assert data(s) == replay(s)
        assert snap.seq == s.last_seq() == len(s.changes_since(0))


def test_snapshot_cache_follows_other_writers_and_isolates_callers(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with SqliteStore(path) as reader, SqliteStore(path) as writer:
        writer.alter([(ALICE, {"producer_byte_rate": 1.0})])
        first = reader.snapshot()
        first.entities[ALICE]["producer_byte_rate"] = 99.0  # a caller scribbling on its copy
        first.entities.pop(ALICE)
        assert reader.snapshot().entities == {ALICE: {"producer_byte_rate": 1.0}}
        writer.alter([(ALICE, {"producer_byte_rate": 2.0}), (IP, {"connection_creation_rate": 3.0})])
        again = reader.snapshot()
        assert again.seq == 3
        assert again.entities == {ALICE: {"producer_byte_rate": 2.0}, IP: {"connection_creation_rate": 3.0}}


def test_a_snapshot_after_a_change_reuses_the_entities_it_parsed(tmp_path: Path) -> None:
    """A snapshot made after a change parses only the changed entities: the others are the objects the previous
    snapshot made (a gateway froze those out of the collector's walks at start; 100,000 made anew would be walked
    by the next collections). A removed entity's path is forgotten. Before, every entity was parsed anew."""
    with SqliteStore(tmp_path / "q.db") as store:
        store.alter([(QuotaEntity(user=f"u{i}"), {"producer_byte_rate": 1.0 + i}) for i in range(50)])
        first = {e.path: e for e in store.snapshot().entities}
        store.alter([(QuotaEntity(user="u3"), {"producer_byte_rate": None}),
                     (QuotaEntity(user="new"), {"consumer_byte_rate": 7.0})])
        second = store.snapshot().entities
        by_path = {e.path: e for e in second}
        assert set(by_path) == set(first) - {QuotaEntity(user="u3").path} | {QuotaEntity(user="new").path}
        assert all(by_path[p] is first[p] for p in by_path if p in first)
        assert second[QuotaEntity(user="new")] == {"consumer_byte_rate": 7.0}
        assert QuotaEntity(user="u3").path not in store._entities_by_path
