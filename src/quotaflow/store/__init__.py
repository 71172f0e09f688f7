"""Quota stores: the ``QuotaStore`` interface and its backends (SQLite by default, or a Kafka topic).

:func:`open_store` is the one factory every command uses for its ``--store`` value (a path, ``sqlite:///PATH`` or
``kafka://HOST:PORT[,HOST:PORT...][/TOPIC]``; see :mod:`quotaflow.store.factory`).
"""

from __future__ import annotations

from pathlib import Path

from quotaflow.store.base import Change, Credential, EntityChange, QuotaStore, Snapshot, Values
from quotaflow.store.factory import (
    DEFAULT_STORE_PATH,
    STORE_ENV,
    SqliteLocation,
    open_store,
    parse_store,
    store_value,
)
from quotaflow.store.sqlite import SqliteStore


def store_path(path: str | Path | None = None) -> Path:
    """The SQLite store file a ``--store`` value names (``$QUOTAFLOW_STORE``, else ``./quotaflow.db``); a
    :class:`~quotaflow.core.errors.StoreError` for a Kafka URL or an unsupported scheme."""
    location = parse_store(path)
    if not isinstance(location, SqliteLocation):
        from quotaflow.core.errors import StoreError

        raise StoreError(f"{location} is not a SQLite store file")
    return location.path


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
    "parse_store",
    "store_path",
    "store_value",
]
