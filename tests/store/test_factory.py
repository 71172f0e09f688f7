"""``--store`` values: paths and sqlite:/// URLs open SQLite, kafka:// parses to a cluster store, anything else with a
URL scheme is refused (never a file); new store files are private; corrupt/read-only stores raise one StoreError."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from quotaflow.core.entities import QuotaEntity
from quotaflow.core.errors import StoreError
from quotaflow.store import SqliteStore, open_store, parse_store, store_path
from quotaflow.store.factory import SqliteLocation
from quotaflow.store.kafka import DEFAULT_TOPIC, KafkaStoreSpec

ALICE = QuotaEntity(user="alice")


@pytest.mark.parametrize(
    ("value", "path"),
    [("q.db", "q.db"), ("dir/q.db", "dir/q.db"), ("/abs/q.db", "/abs/q.db"), ("sqlite:///rel/q.db", "rel/q.db"),
     ("sqlite:////abs/q.db", "/abs/q.db"), ("SQLite:///q.db", "q.db"), ("notes:v2.db", "notes:v2.db")],
)
def test_paths_and_sqlite_urls(value: str, path: str) -> None:
    assert parse_store(value) == SqliteLocation(Path(path))


@pytest.mark.parametrize("value", ["redis://localhost:6379", "kafka:/host:9092", "http://x/q.db", "file:///q.db",
                                   "sqlite:/q.db", "sqlite://q.db", "kafka://", "kafka://host", "kafka://h:99999",
                                   "kafka://h:1/bad topic", ""])
def test_unsupported_or_malformed_urls_are_errors(value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError):
        open_store(value)
    assert list(tmp_path.iterdir()) == []  # nothing created under any spelling of the value


def test_env_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUOTAFLOW_STORE", "sqlite:///from-env.db")
    assert store_path() == Path("from-env.db")
    monkeypatch.delenv("QUOTAFLOW_STORE")
    assert store_path() == Path("quotaflow.db")
    with pytest.raises(StoreError, match="not a SQLite store file"):
        store_path("kafka://127.0.0.1:9092")


def test_kafka_url(tmp_path: Path) -> None:
    spec = parse_store("kafka://b1:9092,b2:9093")
    assert isinstance(spec, KafkaStoreSpec)
    assert spec.bootstrap == ("b1:9092", "b2:9093") and spec.topic == DEFAULT_TOPIC and dict(spec.client) == {}
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                     'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                     'username="admin" password="s\\\\\\"cret";\nssl.ca.location=/etc/ca.pem\n')
    spec = KafkaStoreSpec.parse(f"kafka://b1:9092/quotas.prod?config={props}&request.timeout.ms=5000"
                                "&ssl.endpoint.identification.algorithm=&replication.factor=3")
    assert spec.topic == "quotas.prod" and spec.timeout_ms == 5000 and spec.replication_factor == 3
    assert dict(spec.client) == {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
                                 "sasl_plain_username": "admin", "sasl_plain_password": 's"cret',
                                 "ssl_cafile": "/etc/ca.pem", "ssl_check_hostname": False}
    assert str(spec) == "kafka://b1:9092/quotas.prod"  # never the settings (they may hold a password)
    with pytest.raises(StoreError, match=r"unknown Kafka store setting 'bogus\.setting'"):
        KafkaStoreSpec.parse("kafka://b1:9092?bogus.setting=1")
    with pytest.raises(StoreError, match="cannot read"):
        KafkaStoreSpec.parse(f"kafka://b1:9092?config={tmp_path / 'missing.properties'}")


def _modes(directory: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()}


def test_new_store_files_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with open_store(tmp_path / "new" / "q.db") as store:
            store.alter([(ALICE, {"producer_byte_rate": 1000.0})])
            modes = _modes(tmp_path / "new")
    finally:
        os.umask(old)
    assert "q.db-wal" in modes and modes == dict.fromkeys(modes, 0o600)
    existing = tmp_path / "existing.db"
    existing.touch(mode=0o640)
    existing.chmod(0o640)
    open_store(existing).close()
    assert stat.S_IMODE(existing.stat().st_mode) == 0o640  # an operator's own choice is kept


def test_missing_store_is_refused_where_nothing_should_be_created(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        open_store(tmp_path / "nope.db", create=False)
    assert not (tmp_path / "nope.db").exists()


def test_corrupt_stores(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"definitely not sqlite" * 500)
    with pytest.raises(StoreError, match="file is not a database"):
        open_store(garbage)
    good = tmp_path / "good.db"
    with open_store(good) as store:
        store.alter([(QuotaEntity(user=f"u{i}"), {"producer_byte_rate": float(i + 1)}) for i in range(500)])
    data = bytearray(good.read_bytes())
    data[8192:] = b"\x5a" * (len(data) - 8192)  # a valid header, then corrupt pages
    good.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="malformed") as info, open_store(good) as store:
        store.snapshot()
    assert str(info.value).count("\n") == 0


class _ReadOnlyDb:
    """A connection whose writes fail as SQLite's do on a read-only file (tests run as root, which bypasses
    file modes)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.in_transaction = False

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.lstrip().upper().startswith(("INSERT", "DELETE", "BEGIN IMMEDIATE")):
            raise sqlite3.OperationalError("attempt to write a readonly database")
        return self._db.execute(sql, *args)


def test_read_only_store_is_one_store_error(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "q.db")
    store._db = _ReadOnlyDb(store._db)  # type: ignore[assignment]
    assert store.snapshot().entities == {}  # reads still work
    with pytest.raises(StoreError, match=r"readonly database.*write access"):
        store.alter([(ALICE, {"producer_byte_rate": 1.0})])


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file modes")
def test_read_only_file(tmp_path: Path) -> None:  # pragma: no cover - CI runs as root
    path = tmp_path / "q.db"
    open_store(path).close()
    path.chmod(0o400)
    with pytest.raises(StoreError), open_store(path) as store:
        store.alter([(ALICE, {"producer_byte_rate": 1.0})])
