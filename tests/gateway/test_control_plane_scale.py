"""Control-plane work does not grow with the control plane: counted, not timed (the times are in
bench/control_plane_scale.py). A gateway in front of a real tansu, its store holding thousands of entities and ACLs:
a ``/resolve`` reads the change log's new records only, an ACL change indexes the ACLs it changed, a quota change
reaches the engine's managers through the change log."""

from __future__ import annotations

import gc
import json
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quotaflow.admin import Alteration
from quotaflow.admin.wire import WireAdmin
from quotaflow.core.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from quotaflow.core.authorizer import StandardAuthorizer
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.filters import QuotaFilter
from quotaflow.gateway import collector
from quotaflow.gateway.collector import collector_paused, drop_gradually
from quotaflow.gateway.data import quota_admin
from quotaflow.gateway.server import GatewayThread
from quotaflow.gateway.wire import quota_entries
from quotaflow.gateway.wire.protocol import encode_response
from quotaflow.gateway.wire.quota_entries import encode_describe_response
from quotaflow.store.base import Snapshot
from quotaflow.store.sqlite import SqliteStore
from quotaflow.testing.tansu import Tansu

ENTITIES = 5_000
ACLS = 5_000


def topic_acl(i: int) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, f"tenant-{i}", PatternType.LITERAL),
                      AccessControlEntry(f"User:t{i % 50}", "*", AclOperation.WRITE, AclPermissionType.ALLOW))


class SnapshotCounting(SqliteStore):
    """The SQLite store, counting whole-store reads."""

    snapshots = 0

    def snapshot(self) -> Snapshot:
        type(self).snapshots += 1
        return super().snapshot()


@pytest.fixture
def gateway(tansu: Tansu, tmp_path: Path) -> Iterator[tuple[GatewayThread, SqliteStore]]:
    store = SnapshotCounting(tmp_path / "q.db")
    store.alter([(QuotaEntity(user=f"u{i}", client_id=f"c{i}"), {"producer_byte_rate": 1000.0 + i})
                 for i in range(ENTITIES)])
    store.add_acls([topic_acl(i) for i in range(ACLS)])
    authorizer = StandardAuthorizer((), True, store_backed=True)
    with GatewayThread(tansu.bootstrap, {"PLAINTEXT": "127.0.0.1:0"}, store, metrics_port=0,
                       authorizer=authorizer) as gw:
        yield gw, store
    store.close()


def resolve(gw: GatewayThread, user: str, client_id: str) -> Any:
    assert gw.gateway is not None and gw.gateway.metrics_address is not None
    host, port = gw.gateway.metrics_address
    with urllib.request.urlopen(f"http://{host}:{port}/resolve?user={user}&client-id={client_id}", timeout=30) as r:
        return json.load(r)


pytestmark = pytest.mark.broker


def test_resolve_reads_no_whole_store(gateway: tuple[GatewayThread, SqliteStore]) -> None:
    """After start, /resolve never reads the whole store again, and still sees an alteration made a moment ago
    (before: every /resolve read and indexed every entity, on the event loop)."""
    gw, _store = gateway
    assert gw.gateway is not None
    before = SnapshotCounting.snapshots
    first = resolve(gw, "u7", "c7")
    gw.gateway.admin.alter([Alteration.of(QuotaEntity(user="u7", client_id="c7"), {"producer_byte_rate": 42.0})])
    second = resolve(gw, "u7", "c7")
    for _ in range(5):
        resolve(gw, "u8", "c8")
    assert SnapshotCounting.snapshots == before
    assert json.dumps(first) != json.dumps(second) and "42.0" in json.dumps(second)


def test_an_acl_change_indexes_that_acl_only(gateway: tuple[GatewayThread, SqliteStore]) -> None:
    """One ACL added to the store by someone else (the CLI): the gateway's index takes it by indexing one binding,
    not the 5,000 it holds (before: the whole index was rebuilt), and decides with it."""
    gw, store = gateway
    assert gw.gateway is not None
    authorizer = gw.gateway.authorizer
    assert isinstance(authorizer, StandardAuthorizer)
    assert len(authorizer.index) == ACLS
    deny = AclBinding(ResourcePattern(ResourceType.TOPIC, "tenant-3", PatternType.LITERAL),
                      AccessControlEntry("User:t3", "*", AclOperation.ALL, AclPermissionType.DENY))
    version = store.add_acls([deny])
    deadline = time.monotonic() + 30
    while authorizer.version < version and time.monotonic() < deadline:
        time.sleep(0.05)
    assert authorizer.version == version
    assert authorizer.index.indexed == 1
    assert not authorizer.authorize("User:t3", "127.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, "tenant-3")
    assert authorizer.authorize("User:t4", "127.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, "tenant-4")


def test_a_quota_change_reaches_the_engine_through_the_change_log(
        gateway: tuple[GatewayThread, SqliteStore]) -> None:
    """The engine's managers (what throttles) take an alteration from the change log; no whole-store read."""
    gw, store = gateway
    assert gw.gateway is not None
    enforcement = gw.call(lambda: gw.gateway.broker_quotas.for_broker("b"))  # type: ignore[union-attr]
    assert gw.call(lambda: enforcement.managers.produce.quota_limit("u9", "c9")) == 1009.0
    before = SnapshotCounting.snapshots
    store.alter([(QuotaEntity(user="u9", client_id="c9"), {"producer_byte_rate": 7.0})])
    deadline = time.monotonic() + 30
    while gw.call(lambda: enforcement.managers.produce.quota_limit("u9", "c9")) != 7.0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert SnapshotCounting.snapshots == before


def test_describe_all_is_encoded_off_the_loop_without_message_objects(
        gateway: tuple[GatewayThread, SqliteStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """DescribeClientQuotas of every entity over the wire (kafka-python's admin): the response is made in an
    executor thread, with the cycle collector paused and the GIL's switch interval lowered (the loop gets it back
    within ``LOOP_FIRST_SWITCH_S`` whenever it wants it), straight from the entities to bytes, a chunk of entries
    per join; kafka-python's generic encoder (a message object per entity and part, seconds of CPU at 100,000
    entities) is not used for it. Before: a kafka-python message of every entity, encoded whole."""
    gw, _store = gateway
    assert gw.gateway is not None
    loop_thread = gw.call(threading.get_ident)
    seen: list[tuple[bool, float, bool, int]] = []
    generic: list[int] = []

    def spy(version: int, correlation_id: int, entries: Any, **kwargs: Any) -> bytes:
        seen.append((threading.get_ident() != loop_thread, sys.getswitchinterval(), gc.isenabled(),
                     len(entries or ())))
        return encode_describe_response(version, correlation_id, entries, **kwargs)

    def counted(message: Any, version: int, correlation_id: int) -> bytes:
        generic.append(version)
        return encode_response(message, version, correlation_id)

    monkeypatch.setattr(quota_admin, "encode_describe_response", spy)
    monkeypatch.setattr(quota_admin, "encode_response", counted)
    monkeypatch.setattr(quota_entries, "JOIN_ENTRIES", 700)  # several chunks at this size
    before = sys.getswitchinterval()
    admin = WireAdmin(gw.bootstrap())
    try:
        found = admin.describe(QuotaFilter())
    finally:
        admin.close()
    assert len(found) == ENTITIES
    assert {d.entity: d.values for d in found}[QuotaEntity(user="u7", client_id="c7")] == {
        "producer_byte_rate": 1007.0}
    assert seen == [(True, collector.LOOP_FIRST_SWITCH_S, False, ENTITIES)] and generic == []
    assert sys.getswitchinterval() == before and gc.isenabled()


def test_loop_first_nests_across_threads() -> None:
    """The switch interval is lowered while any holder runs and restored after the last."""
    before = sys.getswitchinterval()
    inside = threading.Event()
    release = threading.Event()

    def other() -> None:
        with collector.loop_first():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    with collector.loop_first():
        t.start()
        inside.wait(10)
        assert sys.getswitchinterval() == collector.LOOP_FIRST_SWITCH_S
    assert sys.getswitchinterval() == collector.LOOP_FIRST_SWITCH_S  # the other thread's still holds
    release.set()
    t.join(10)
    assert sys.getswitchinterval() == before


def test_collector_pauses_nest_across_threads() -> None:
    """The collector is off while any pause holds and on again after the last, as it was before the first."""
    assert gc.isenabled()
    inside = threading.Event()
    release = threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    with collector_paused():
        t.start()
        inside.wait(10)
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread's pause still holds
    release.set()
    t.join(10)
    assert gc.isenabled()


def test_drop_gradually_frees_what_only_the_list_held() -> None:
    """A list emptied chunk by chunk: what only it referenced is freed, what others hold stays."""
    import weakref

    class Item:
        pass

    items = [Item() for _ in range(2_500)]
    kept = items[10]
    refs = [weakref.ref(i) for i in items]
    drop_gradually(items, chunk=1000)
    assert items == []
    assert sum(r() is not None for r in refs) == 1 and refs[10]() is kept
