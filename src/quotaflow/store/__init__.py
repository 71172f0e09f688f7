"""Quota stores: the ``QuotaStore`` interface and its backends (SQLite by default)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from quotaflow.store.base import Change, Credential, EntityChange, QuotaStore, Snapshot, Values
from quotaflow.store.sqlite import SqliteStore

DEFAULT_STORE_PATH: Final = "quotaflow.db"
STORE_ENV: Final = "QUOTAFLOW_STORE"


def store_path(path: str | Path | None = None) -> Path:
    """The store file: ``path`` if given, else ``$QUOTAFLOW_STORE``, else ``./quotaflow.db``."""
    return Path(path if path is not None else os.environ.get(STORE_ENV) or DEFAULT_STORE_PATH)


def open_store(path: str | Path | None = None) -> SqliteStore:
    """Open (creating and migrating as needed) the SQLite quota store."""
    return SqliteStore(store_path(path))


__all__ = [
    "DEFAULT_STORE_PATH",
    "STORE_ENV",
    "Change",
    "Credential",
    "EntityChange",
    "QuotaStore",
    "Snapshot",
    "SqliteStore",
    "Values",
    "open_store",
    "store_path",
]
