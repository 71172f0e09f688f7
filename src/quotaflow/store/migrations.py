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
)

SCHEMA_VERSION: Final = len(MIGRATIONS)
