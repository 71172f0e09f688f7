"""``--store`` values to stores: one factory every command uses (a path, ``sqlite:///PATH`` or ``kafka://...``).

A value with a URL scheme quotaflow does not know is an error, never a file name: ``kafka:/host:9092`` must not
quietly become a local SQLite file next to the operator's shell. ``sqlite:///rel.db`` and ``sqlite:////abs.db``
follow SQLAlchemy's spelling (three slashes, then the path).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from quotaflow.core.errors import StoreError

if TYPE_CHECKING:
    from quotaflow.store.kafka import KafkaStore, KafkaStoreSpec
    from quotaflow.store.sqlite import SqliteStore

DEFAULT_STORE_PATH: Final = "quotaflow.db"
STORE_ENV: Final = "QUOTAFLOW_STORE"
SQLITE_SCHEME: Final = "sqlite"
KAFKA_SCHEME: Final = "kafka"
SUPPORTED: Final = "a file path, sqlite:///PATH or kafka://HOST:PORT[,HOST:PORT...][/TOPIC]"

_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(.*)$", re.S)


@dataclass(frozen=True, slots=True)
class SqliteLocation:
    path: Path

    def __str__(self) -> str:
        return str(self.path)


def store_value(value: str | os.PathLike[str] | None = None) -> str:
    """The ``--store`` value: ``value`` if given, else ``$QUOTAFLOW_STORE``, else ``./quotaflow.db``."""
    if value is not None:
        return os.fspath(value)
    return os.environ.get(STORE_ENV) or DEFAULT_STORE_PATH


def parse_store(value: str | os.PathLike[str] | None = None) -> SqliteLocation | KafkaStoreSpec:
    """Where a ``--store`` value points; :class:`StoreError` for an empty value or an unsupported scheme."""
    if isinstance(value, Path):
        return SqliteLocation(value)
    text = store_value(value)
    if not text.strip():
        raise StoreError("--store must not be empty")
    match = _SCHEME.match(text)
    # a one-letter "scheme" is a Windows drive (C:\...), not a URL
    if match is None or len(match.group(1)) == 1:
        return SqliteLocation(Path(text))
    scheme, rest = match.group(1).lower(), match.group(2)
    if scheme == SQLITE_SCHEME:
        if not rest.startswith("///") or len(rest) == 3:
            raise StoreError(f"invalid SQLite store URL {text!r}: expected sqlite:///PATH (sqlite:////ABSOLUTE/PATH)")
        return SqliteLocation(Path(rest[3:]))
    if scheme == KAFKA_SCHEME:
        from quotaflow.store.kafka import KafkaStoreSpec

        return KafkaStoreSpec.parse(text)
    if not rest.startswith("/"):
        return SqliteLocation(Path(text))  # "notes:v2.db": a file name with a colon, not a URL
    raise StoreError(f"unsupported quota store URL scheme {scheme!r} in {text!r}; expected {SUPPORTED}")


def open_store(value: str | os.PathLike[str] | None = None, *, create: bool = True,
               notice: Callable[[str], None] | None = None, from_checkpoint: bool = False
               ) -> SqliteStore | KafkaStore:
    """Open the store a ``--store`` value names. ``create=False`` (read-only commands) refuses a missing SQLite
    file instead of creating an empty one; a Kafka store's topic is created on first use either way. ``notice``
    (a CLI's stderr) hears what a slow connection to a Kafka store is waiting for; ``from_checkpoint`` (a command
    that needs the current state, not the history) starts a Kafka store's reader from its newest checkpoint."""
    location = parse_store(value)
    if isinstance(location, SqliteLocation):
        from quotaflow.store.sqlite import SqliteStore

        if not create and not location.path.is_file():
            raise StoreError(f"quota store {location.path} does not exist")
        return SqliteStore(location.path)
    from quotaflow.store.kafka import KafkaStore

    return KafkaStore(location, notice=notice, from_checkpoint=from_checkpoint)


def stderr_notice(message: str) -> None:
    """What a slow store connection is waiting for, on stderr (a command's stdout stays its output)."""
    print(message, file=sys.stderr, flush=True)


def open_reader(value: str | os.PathLike[str] | None) -> SqliteStore | KafkaStore:
    """The store of a command or job that only reads its current state (backtest, replay, recommend, the shadow
    report, describe): a missing SQLite file is an error, never created; a Kafka store's reader starts from its newest
    checkpoint and says on stderr what a slow connection waits for, as every CLI command does."""
    return open_store(value, create=False, notice=stderr_notice, from_checkpoint=True)


def describe_store(value: str | os.PathLike[str] | None = None) -> str:
    """The store for messages: a path, or a Kafka URL without credentials."""
    return str(parse_store(value))


def store_identity(value: str | os.PathLike[str]) -> str:
    """One spelling per store, to tell whether two ``--store`` values name the same one: a SQLite file's
    absolute path, a Kafka store's URL as parsed (a recommend output records it; the console compares)."""
    loc = parse_store(value)
    if isinstance(loc, SqliteLocation):
        return str(loc.path.expanduser().resolve())
    return str(loc)
