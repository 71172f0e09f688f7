"""Versioned SQLite schema: migration N brings a database from ``user_version`` N-1 to N.

Append new migrations at the end; never edit one that has shipped.
"""

from __future__ import annotations

from typing import Final

MIGRATIONS: Final[tuple[str, ...]] = (
    # 1: quota values keyed by entity path, the append-only change log, SASL/PLAIN credentials
    """
    CREATE TABLE quotas (
        path  TEXT NOT NULL,
        key   TEXT NOT NULL,
        value REAL NOT NULL,          -- NaN is kept as the text 'NaN' (SQLite turns a NaN REAL into NULL)
        PRIMARY KEY (path, key)
    ) WITHOUT ROWID;
    CREATE TABLE changes (
        seq   INTEGER PRIMARY KEY AUTOINCREMENT,   -- AUTOINCREMENT: a seq is never reused
        ts_ms INTEGER NOT NULL,
        path  TEXT NOT NULL,
        key   TEXT NOT NULL,
        value REAL                   -- NULL: the key was removed
    );
    CREATE TABLE credentials (
        user       TEXT PRIMARY KEY,
        salt       BLOB NOT NULL,
        iterations INTEGER NOT NULL,
        hash       BLOB NOT NULL
    );
    """,
    # 2: SCRAM credentials as Kafka keeps them (RFC 5802): per user and mechanism, the salt, the iteration count and
    # the StoredKey / ServerKey derived from the password; never the password or its salted form
    """
    CREATE TABLE scram_credentials (
        user       TEXT NOT NULL,
        mechanism  TEXT NOT NULL,
        salt       BLOB NOT NULL,
        stored_key BLOB NOT NULL,
        server_key BLOB NOT NULL,
        iterations INTEGER NOT NULL,
        PRIMARY KEY (user, mechanism)
    ) WITHOUT ROWID;
    """,
    # 3: Kafka ACL bindings (resource pattern + entry, Kafka's enum codes) and their change log, whose last seq is the
    # ACL version every gateway polls
    """
    CREATE TABLE acls (
        resource_type   INTEGER NOT NULL,
        name            TEXT NOT NULL,
        pattern_type    INTEGER NOT NULL,
        principal       TEXT NOT NULL,
        host            TEXT NOT NULL,
        operation       INTEGER NOT NULL,
        permission_type INTEGER NOT NULL,
        PRIMARY KEY (resource_type, name, pattern_type, principal, host, operation, permission_type)
    ) WITHOUT ROWID;
    CREATE TABLE acl_changes (
        seq             INTEGER PRIMARY KEY AUTOINCREMENT,
        ts_ms           INTEGER NOT NULL,
        added           INTEGER NOT NULL,   -- 1 added, 0 removed
        resource_type   INTEGER NOT NULL,
        name            TEXT NOT NULL,
        pattern_type    INTEGER NOT NULL,
        principal       TEXT NOT NULL,
        host            TEXT NOT NULL,
        operation       INTEGER NOT NULL,
        permission_type INTEGER NOT NULL
    );
    """,
    # 4: shadow quota sets (issue 36) and the promotion history; every start, stop, promote and rollback is a row of
    # shadow_log, whose last version is the shadow version gateways poll (and a shadow set's / promotion's id); a
    # promotion's changes carry the instant the fleet applies them
    """
    ALTER TABLE changes ADD COLUMN effective_ms INTEGER;  -- NULL: apply when read
    CREATE TABLE shadow_log (
        version INTEGER PRIMARY KEY AUTOINCREMENT,
        ts_ms   INTEGER NOT NULL,
        event   TEXT NOT NULL,            -- start | stop | promote | rollback
        shadow  INTEGER NOT NULL          -- the shadow set it concerns
    );
    CREATE TABLE shadow_sets (
        id         INTEGER PRIMARY KEY,   -- the shadow_log version of its start
        name       TEXT NOT NULL,
        started_by TEXT NOT NULL,
        started_ms INTEGER NOT NULL,
        changes    TEXT NOT NULL,         -- JSON [{"entity": path, "ops": {key: value | null}}]
        outcome    TEXT NOT NULL,         -- running | stopped | replaced | promoted
        ended_by   TEXT,
        ended_ms   INTEGER
    );
    CREATE UNIQUE INDEX shadow_sets_running ON shadow_sets (outcome) WHERE outcome = 'running';
    CREATE TABLE promotions (
        id           INTEGER PRIMARY KEY, -- the shadow_log version of the promote / rollback
        kind         TEXT NOT NULL,       -- promote | rollback
        shadow_id    INTEGER NOT NULL,
        shadow_name  TEXT NOT NULL,
        by           TEXT NOT NULL,
        at_ms        INTEGER NOT NULL,
        effective_ms INTEGER NOT NULL,
        first_seq    INTEGER NOT NULL,    -- its changes: first_seq <= changes.seq <= last_seq
        last_seq     INTEGER NOT NULL,
        previous     TEXT NOT NULL,       -- JSON, as shadow_sets.changes (null: the key was absent)
        applied      TEXT NOT NULL
    );
    """,
)

SCHEMA_VERSION: Final = len(MIGRATIONS)
