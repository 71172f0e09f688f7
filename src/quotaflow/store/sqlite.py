"""The SQLite quota store: one file, safe for several processes (WAL, busy timeout, ``BEGIN IMMEDIATE``).

Each ``alter`` call is one transaction, so a crash (even SIGKILL) leaves every entity all-or-nothing, and the
change log is always exactly the history of the data. Entities are stored under their KIP-55 / KIP-612 path
(``users/<sanitized>/clients/<client>``), which is canonical and parses back to the entity.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

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
from quotaflow.core.errors import ShadowStateError, StoreError
from quotaflow.store.base import (
    AclChange,
    AclSnapshot,
    AclStore,
    Change,
    Credential,
    EntityChange,
    Promotion,
    QuotaStore,
    ScramCredential,
    ShadowSet,
    ShadowStore,
    Snapshot,
    Values,
)
from quotaflow.store.migrations import MIGRATIONS, SCHEMA_VERSION
from quotaflow.store.shadowing import (
    PROMOTE,
    PROMOTED,
    REPLACED,
    ROLLBACK,
    RUNNING,
    STOPPED,
    changes_from_json,
    changes_to_json,
    check_rollback,
    effective,
    rollback_target,
)

BUSY_TIMEOUT_MS: Final = 30_000
_NAN: Final = "NaN"


def _encode(value: float) -> float | str:
    return _NAN if math.isnan(value) else value


def _decode(value: float | int | str) -> float:
    return float(value)


@lru_cache(maxsize=1 << 18)
def _entity(path: str) -> QuotaEntity:
    return QuotaEntity.from_path(path)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class SqliteStore:
    """:class:`~quotaflow.store.base.QuotaStore` over one SQLite file. Thread-safe (one connection, one lock)."""

    def __init__(self, path: str | Path, *, clock_ms: Callable[[], int] = _now_ms) -> None:
        self.path = Path(path)
        self._clock_ms = clock_ms
        self._lock = threading.RLock()
        self._snapshot_cache: Snapshot | None = None
        self._entities_by_path: dict[str, QuotaEntity] = {}
        """The entity of each stored path, kept across snapshots: a snapshot made after a change reuses the
        entities it already parsed, so it makes only the changed ones (a gateway freezes what it loaded at start
        out of the collector's walks; 100,000 entities made anew by each snapshot would each be walked again by
        the next young and full collections, tens of ms that hold the GIL)."""
        try:
            if str(self.path) != ":memory:":
                _create_private(self.path)
            self._db = sqlite3.connect(
                str(self.path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except (sqlite3.Error, OSError) as e:
            raise StoreError(f"cannot open quota store {self.path}: {_reason(e)}") from e

    # -- schema -----------------------------------------------------------------------------------------------

    def _migrate(self) -> None:
        with self._write() as db:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"quota store {self.path} has schema version {version}, newer than this quotaflow "
                    f"({SCHEMA_VERSION})"
                )
            for number in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[number - 1].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {number}")

    @property
    def schema_version(self) -> int:
        with self._locked():
            return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    # -- transactions ---------------------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        """The connection under the lock; a SQLite failure (corrupt page, read-only file, full disk) becomes one
        :class:`StoreError` line instead of a sqlite3 traceback."""
        with self._lock:
            try:
                yield self._db
            except sqlite3.Error as e:
                raise StoreError(f"quota store {self.path}: {_reason(e)}") from e

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; ``BEGIN IMMEDIATE`` takes the write lock up front so writers queue, not fail."""
        with self._locked() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction, so several queries see the same committed state."""
        with self._locked() as db:
            db.execute("BEGIN")
            try:
                yield db
            finally:
                if db.in_transaction:
                    db.execute("COMMIT")

    # -- quotas ---------------------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """A consistent snapshot, ordered by entity path. Parsed rows are reused while the log has not moved
        (every committed change, from any process, advances it); each caller gets its own dicts."""
        stale = None
        with self._read() as db:
            seq = self._last_seq(db)
            cached = self._snapshot_cache
            if cached is None or cached.seq != seq:
                stale = cached
                cached = Snapshot(seq, self._load_entities(db))
                self._snapshot_cache = cached
        if stale is not None:
            _drop_entities(stale.entities)
        return Snapshot(seq, {e: dict(v) for e, v in cached.entities.items()})

    def _load_entities(self, db: sqlite3.Connection) -> dict[QuotaEntity, Values]:
        rows = db.execute("SELECT path, key, value FROM quotas ORDER BY path").fetchall()
        known = self._entities_by_path
        entities: dict[QuotaEntity, Values] = {}
        current_path = None
        current: Values = {}
        for path, key, value in rows:
            if path != current_path:
                current_path = path
                entity = known.get(path)
                if entity is None:
                    entity = known[path] = _entity(path)
                current = entities.setdefault(entity, {})
            current[key] = _decode(value)
        if len(known) > len(entities):  # paths no longer stored are forgotten
            for gone in [p for p, e in known.items() if e not in entities]:
                del known[gone]
        return entities

    def get(self, entity: QuotaEntity) -> Values:
        with self._locked():
            rows = self._db.execute("SELECT key, value FROM quotas WHERE path = ?", (entity.path,)).fetchall()
        return {k: _decode(v) for k, v in rows}

    def alter(self, changes: Sequence[EntityChange]) -> int:
        """Apply every change in one transaction. A set equal to the stored value and the removal of an absent
        key are no-ops and are not logged, so the log holds exactly the effective changes."""
        ts = self._clock_ms()
        with self._write() as db:
            self._alter_in(db, changes, ts)
            return self._last_seq(db)

    @staticmethod
    def _alter_in(db: sqlite3.Connection, changes: Sequence[EntityChange], ts: int,
                  effective_ms: int | None = None) -> None:
        """``alter``'s work inside the caller's transaction (a promotion's changes carry its ``effective_ms``)."""
        for entity, ops in changes:
            path = entity.path
            current = dict(db.execute("SELECT key, value FROM quotas WHERE path = ?", (path,)).fetchall())
            for key, value in ops.items():
                old = current.get(key)
                if value is None:
                    if old is None:
                        continue
                    db.execute("DELETE FROM quotas WHERE path = ? AND key = ?", (path, key))
                    current.pop(key)
                else:
                    if old is not None and _same(_decode(old), value):
                        continue
                    db.execute(
                        "INSERT INTO quotas (path, key, value) VALUES (?, ?, ?) "
                        "ON CONFLICT (path, key) DO UPDATE SET value = excluded.value",
                        (path, key, _encode(value)),
                    )
                    current[key] = value
                db.execute(
                    "INSERT INTO changes (ts_ms, path, key, value, effective_ms) VALUES (?, ?, ?, ?, ?)",
                    (ts, path, key, None if value is None else _encode(value), effective_ms),
                )

    def changes_since(self, seq: int, limit: int | None = None) -> list[Change]:
        sql = "SELECT seq, ts_ms, path, key, value, effective_ms FROM changes WHERE seq > ? ORDER BY seq"
        params: tuple[int, ...] = (seq,)
        if limit is not None:
            sql += " LIMIT ?"
            params = (seq, limit)
        with self._locked():
            rows = self._db.execute(sql, params).fetchall()
        return [Change(s, ts, _entity(p), k, None if v is None else _decode(v), e) for s, ts, p, k, v, e in rows]

    def last_seq(self) -> int:
        with self._locked():
            return self._last_seq(self._db)

    @staticmethod
    def _last_seq(db: sqlite3.Connection) -> int:
        row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
        return int(row[0]) if row else 0

    # -- credentials ------------------------------------------------------------------------------------------

    def put_credential(self, credential: Credential) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO credentials (user, salt, iterations, hash) VALUES (?, ?, ?, ?) ON CONFLICT (user) "
                "DO UPDATE SET salt = excluded.salt, iterations = excluded.iterations, hash = excluded.hash",
                (credential.user, credential.salt, credential.iterations, credential.hash),
            )

    def get_credential(self, user: str) -> Credential | None:
        with self._locked():
            row = self._db.execute(
                "SELECT user, salt, iterations, hash FROM credentials WHERE user = ?", (user,)
            ).fetchone()
        return None if row is None else Credential(row[0], bytes(row[1]), int(row[2]), bytes(row[3]))

    def delete_credential(self, user: str) -> bool:
        """Every credential of ``user`` (PLAIN and SCRAM)."""
        with self._write() as db:
            plain = db.execute("DELETE FROM credentials WHERE user = ?", (user,)).rowcount
            scram = db.execute("DELETE FROM scram_credentials WHERE user = ?", (user,)).rowcount
            return plain + scram > 0

    def list_credentials(self) -> list[str]:
        with self._locked():
            return [r[0] for r in self._db.execute(
                "SELECT user FROM credentials UNION SELECT user FROM scram_credentials ORDER BY user").fetchall()]

    def put_scram_credential(self, credential: ScramCredential) -> None:
        c = credential
        with self._write() as db:
            db.execute(
                "INSERT INTO scram_credentials (user, mechanism, salt, stored_key, server_key, iterations) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (user, mechanism) DO UPDATE SET salt = excluded.salt, "
                "stored_key = excluded.stored_key, server_key = excluded.server_key, iterations = excluded.iterations",
                (c.user, c.mechanism, c.salt, c.stored_key, c.server_key, c.iterations),
            )

    def delete_scram_credential(self, user: str, mechanism: str) -> bool:
        """One SCRAM mechanism's credential of ``user`` (KIP-554 deletions); True when it existed."""
        with self._write() as db:
            return bool(db.execute("DELETE FROM scram_credentials WHERE user = ? AND mechanism = ?",
                                   (user, mechanism)).rowcount)

    def get_scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        with self._locked():
            row = self._db.execute(
                "SELECT salt, stored_key, server_key, iterations FROM scram_credentials "
                "WHERE user = ? AND mechanism = ?", (user, mechanism)).fetchone()
        return None if row is None else ScramCredential(user, mechanism, bytes(row[0]), bytes(row[1]),
                                                        bytes(row[2]), int(row[3]))

    # -- ACLs -------------------------------------------------------------------------------------------------

    _ACL_COLUMNS: Final = "resource_type, name, pattern_type, principal, host, operation, permission_type"

    def acls(self) -> AclSnapshot:
        with self._read() as db:
            version = self._acl_version(db)
            rows = db.execute(f"SELECT {self._ACL_COLUMNS} FROM acls").fetchall()
        return AclSnapshot(version, frozenset(_binding(row) for row in rows))

    def acl_version(self) -> int:
        with self._locked() as db:
            return self._acl_version(db)

    def acl_changes_since(self, version: int) -> list[AclChange] | None:
        """From the ``acl_changes`` log (one row per effective change, its seq the version it made). None when the
        rows after ``version`` are not every version up to the current one (rows deleted by hand, a store replaced
        under the reader), so the reader falls back to the whole set rather than trust a partial delta."""
        with self._read() as db:
            current = self._acl_version(db)
            if version > current:
                return None
            rows = db.execute(f"SELECT seq, added, {self._ACL_COLUMNS} FROM acl_changes WHERE seq > ? ORDER BY seq",
                              (version,)).fetchall()
        if len(rows) != current - version or (rows and (rows[0][0] != version + 1 or rows[-1][0] != current)):
            return None
        return [AclChange(int(row[0]), _binding(row[2:]), bool(row[1])) for row in rows]

    @staticmethod
    def _acl_version(db: sqlite3.Connection) -> int:
        row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'acl_changes'").fetchone()
        return int(row[0]) if row else 0

    def add_acls(self, bindings: Sequence[AclBinding]) -> int:
        return self._change_acls(bindings, added=True)

    def remove_acls(self, bindings: Sequence[AclBinding]) -> int:
        return self._change_acls(bindings, added=False)

    def _change_acls(self, bindings: Sequence[AclBinding], *, added: bool) -> int:
        """One transaction; only effective changes are logged (and move the version)."""
        ts = self._clock_ms()
        placeholders = ", ".join("?" * 7)
        where = " AND ".join(f"{c} = ?" for c in self._ACL_COLUMNS.split(", "))
        with self._write() as db:
            for binding in bindings:
                row = _row(binding)
                if added:
                    changed = db.execute(f"INSERT OR IGNORE INTO acls ({self._ACL_COLUMNS}) VALUES ({placeholders})",
                                         row).rowcount
                else:
                    changed = db.execute(f"DELETE FROM acls WHERE {where}", row).rowcount
                if changed:
                    db.execute(f"INSERT INTO acl_changes (ts_ms, added, {self._ACL_COLUMNS}) "
                               f"VALUES (?, ?, {placeholders})", (ts, int(added), *row))
            return self._acl_version(db)

    # -- shadow sets ----------------------------------------------------------------------------------------------

    _SHADOW_COLUMNS: Final = "id, name, started_by, started_ms, changes, outcome, ended_by, ended_ms"
    _PROMOTION_COLUMNS: Final = ("id, kind, shadow_id, shadow_name, by, at_ms, effective_ms, first_seq, last_seq, "
                                 "previous, applied")

    def shadow(self) -> ShadowSet | None:
        with self._locked() as db:
            return self._running(db)

    def shadow_version(self) -> int:
        with self._locked() as db:
            return self._shadow_version(db)

    @staticmethod
    def _shadow_version(db: sqlite3.Connection) -> int:
        row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'shadow_log'").fetchone()
        return int(row[0]) if row else 0

    def _running(self, db: sqlite3.Connection) -> ShadowSet | None:
        row = db.execute(f"SELECT {self._SHADOW_COLUMNS} FROM shadow_sets WHERE outcome = ?", (RUNNING,)).fetchone()
        return None if row is None else _shadow_set(row)

    @staticmethod
    def _log_shadow(db: sqlite3.Connection, ts: int, event: str, shadow: int) -> int:
        """A row of the shadow log; its version (the new shadow version)."""
        cursor = db.execute("INSERT INTO shadow_log (ts_ms, event, shadow) VALUES (?, ?, ?)", (ts, event, shadow))
        return int(cursor.lastrowid or 0)

    def _end(self, db: sqlite3.Connection, shadow: ShadowSet, outcome: str, by: str, ts: int) -> ShadowSet:
        db.execute("UPDATE shadow_sets SET outcome = ?, ended_by = ?, ended_ms = ? WHERE id = ?",
                   (outcome, by, ts, shadow.id))
        return dataclasses.replace(shadow, outcome=outcome, ended_by=by, ended_ms=ts)

    def start_shadow(self, name: str, started_by: str, changes: Sequence[EntityChange]) -> ShadowSet:
        """One transaction: the running set (if any) ends ``replaced``, the new one starts."""
        ts = self._clock_ms()
        with self._write() as db:
            running = self._running(db)
            if running is not None:
                self._end(db, running, REPLACED, started_by, ts)
                self._log_shadow(db, ts, "stop", running.id)
            version = self._log_shadow(db, ts, "start", 0)
            db.execute("UPDATE shadow_log SET shadow = version WHERE version = ?", (version,))
            shadow = ShadowSet(version, name, started_by, ts, tuple(changes))
            db.execute(f"INSERT INTO shadow_sets ({self._SHADOW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL)",
                       (shadow.id, name, started_by, ts, _json(changes_to_json(shadow.changes)), RUNNING))
            return shadow

    def stop_shadow(self, stopped_by: str) -> ShadowSet | None:
        ts = self._clock_ms()
        with self._write() as db:
            running = self._running(db)
            if running is None:
                return None
            self._log_shadow(db, ts, "stop", running.id)
            return self._end(db, running, STOPPED, stopped_by, ts)

    def promote_shadow(self, by: str, effective_ms: int) -> Promotion:
        """One transaction: the running set's effective changes go to the quotas and the change log, the set ends
        ``promoted`` and the promotion (with the values it replaced) joins the history."""
        ts = self._clock_ms()
        with self._write() as db:
            running = self._running(db)
            if running is None:
                raise ShadowStateError("no shadow set is running: nothing to promote (`quotaflow shadow start`)")
            previous, applied = effective(running.changes, lambda e: self._values(db, e))
            self._end(db, running, PROMOTED, by, ts)
            return self._batch(db, PROMOTE, running, by, ts, effective_ms, previous, applied)

    def rollback(self, by: str, effective_ms: int, *, force: bool = False) -> Promotion:
        """One transaction: the check against the current values and the restoring batch, so no write slips
        between them."""
        ts = self._clock_ms()
        with self._write() as db:
            target = rollback_target(self._promotions(db))
            check_rollback(target, lambda e: self._values(db, e), force)
            previous, applied = effective(target.previous, lambda e: self._values(db, e))
            shadow = ShadowSet(target.shadow_id, target.shadow_name, "", 0, ())
            return self._batch(db, ROLLBACK, shadow, by, ts, effective_ms, previous, applied)

    def _batch(self, db: sqlite3.Connection, kind: str, shadow: ShadowSet, by: str, ts: int, effective_ms: int,
               previous: tuple[EntityChange, ...], applied: tuple[EntityChange, ...]) -> Promotion:
        """Apply ``applied`` and record it (inside the caller's transaction): its changes are contiguous seqs."""
        first = self._last_seq(db) + 1
        self._alter_in(db, applied, ts, effective_ms)
        version = self._log_shadow(db, ts, kind, shadow.id)
        promotion = Promotion(version, kind, shadow.id, shadow.name, by, ts, effective_ms, first, self._last_seq(db),
                              previous, applied)
        db.execute(f"INSERT INTO promotions ({self._PROMOTION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (promotion.id, kind, shadow.id, shadow.name, by, ts, effective_ms, promotion.first_seq,
                    promotion.last_seq, _json(changes_to_json(previous)), _json(changes_to_json(applied))))
        return promotion

    @staticmethod
    def _values(db: sqlite3.Connection, entity: QuotaEntity) -> Values:
        return {k: _decode(v) for k, v in db.execute("SELECT key, value FROM quotas WHERE path = ?",
                                                     (entity.path,)).fetchall()}

    def shadow_sets(self) -> list[ShadowSet]:
        with self._locked() as db:
            return [_shadow_set(row) for row in
                    db.execute(f"SELECT {self._SHADOW_COLUMNS} FROM shadow_sets ORDER BY id").fetchall()]

    def promotions(self) -> list[Promotion]:
        with self._locked() as db:
            return self._promotions(db)

    def _promotions(self, db: sqlite3.Connection) -> list[Promotion]:
        return [_promotion(row) for row in
                db.execute(f"SELECT {self._PROMOTION_COLUMNS} FROM promotions ORDER BY id").fetchall()]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _drop_entities(entities: dict[QuotaEntity, Values], chunk: int = 1000) -> None:
    """Empty a replaced snapshot a chunk of entities at a time: dropped whole, its 100,000 dicts are freed in one C
    cascade that holds the GIL (tens of milliseconds in which a gateway's event loop serves nobody)."""
    keys = list(entities)
    for start in range(0, len(keys), chunk):
        for key in keys[start:start + chunk]:
            del entities[key]


def _create_private(path: Path) -> None:
    """Create a new store file 0600 (it holds password hashes) before SQLite opens it; SQLite gives its -wal and
    -shm files the database file's mode. An existing file is left as it is."""
    if path.parent != Path(""):
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def _reason(error: BaseException) -> str:
    """The cause in a few words, with a hint where the raw SQLite message is cryptic."""
    text = str(error) or type(error).__name__
    if isinstance(error, OSError) and error.strerror:
        text = error.strerror + (f": {error.filename}" if error.filename else "")
    if "readonly" in text or "read-only" in text:
        return f"{text} (the store needs write access to its file and directory, for the WAL)"
    if "not a database" in text or "malformed" in text:
        return f"{text} (the file is corrupt or not a quotaflow store)"
    return text


def _row(b: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    p, e = b.pattern, b.entry
    return (int(p.resource_type), p.name, int(p.pattern_type), e.principal, e.host, int(e.operation),
            int(e.permission_type))


def _binding(row: tuple[int, str, int, str, str, int, int]) -> AclBinding:
    rt, name, pt, principal, host, op, perm = row
    return AclBinding(ResourcePattern(ResourceType(rt), str(name), PatternType(pt)),
                      AccessControlEntry(str(principal), str(host), AclOperation(op), AclPermissionType(perm)))


def _json(doc: object) -> str:
    return json.dumps(doc, separators=(",", ":"), allow_nan=False)


def _shadow_set(row: tuple[Any, ...]) -> ShadowSet:
    shadow_id, name, started_by, started_ms, changes, outcome, ended_by, ended_ms = row
    return ShadowSet(int(shadow_id), str(name), str(started_by), int(started_ms),
                     changes_from_json(json.loads(changes)), str(outcome), ended_by,
                     None if ended_ms is None else int(ended_ms))


def _promotion(row: tuple[Any, ...]) -> Promotion:
    pid, kind, shadow_id, shadow_name, by, at_ms, effective_ms, first, last, previous, applied = row
    return Promotion(int(pid), str(kind), int(shadow_id), str(shadow_name), str(by), int(at_ms), int(effective_ms),
                     int(first), int(last), changes_from_json(json.loads(previous)),
                     changes_from_json(json.loads(applied)))


def _same(a: float, b: float) -> bool:
    """Java ``Double.equals`` semantics for "set equal to current": NaN equals NaN."""
    return a == b or (math.isnan(a) and math.isnan(b))


if TYPE_CHECKING:  # mypy checks that SqliteStore satisfies the QuotaStore protocol exactly
    _conforms: QuotaStore = SqliteStore(":memory:")
    _acls: AclStore = SqliteStore(":memory:")
    _shadows: ShadowStore = SqliteStore(":memory:")
