"""Quota stores: the ``QuotaStore`` interface and its backends (SQLite by default)."""

from quotaflow.store.base import Change, Credential, EntityChange, QuotaStore, Snapshot, Values

__all__ = ["Change", "Credential", "EntityChange", "QuotaStore", "Snapshot", "Values"]
