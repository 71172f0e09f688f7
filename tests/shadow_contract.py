"""What every :class:`~quotaflow.store.base.ShadowStore` must do, run against each store by its own test module
(``tests/store/test_shadow_sqlite.py`` on real SQLite files, ``tests/gateway/test_store_shadow_kafka.py`` on a
``kafka://`` topic of a real broker). ``open_handle()`` opens another handle on the same store, as another process
(a gateway, a second CLI) would."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.errors import ShadowStateError
from quotaflow.store.base import Change, ShadowStore

ALICE = QuotaEntity(user="alice")
BOB = QuotaEntity(user="bob", client_id="app")
PREFIX = QuotaEntity(client_id_prefix="etl-")
RANGE = QuotaEntity(ip="10.1.0.0/16")
ANY_USER = QuotaEntity(user=DEFAULT)

Handle = Any  # a store: QuotaStore and ShadowStore
Opener = Callable[[], Handle]


def _seed(store: Handle) -> None:
    store.alter([(ALICE, {"producer_byte_rate": 1000.0, "consumer_byte_rate": 2000.0}),
                 (ANY_USER, {"request_percentage": 50.0})])


PROPOSAL = (
    (ALICE, {"producer_byte_rate": 1500.0, "consumer_byte_rate": None}),  # a change and a removal
    (BOB, {"producer_byte_rate": 300.0}),  # a new entity
    (PREFIX, {"request_percentage": 10.0}),
    (RANGE, {"connection_creation_rate": 20.0}),
    (ANY_USER, {"request_percentage": 50.0}),  # equal to the enforced value: changes nothing
)


def start_status_stop_replace(store: Handle, open_handle: Opener) -> None:
    assert isinstance(store, ShadowStore)
    assert store.shadow() is None and store.stop_shadow("ops") is None
    v0 = store.shadow_version()
    first = store.start_shadow("first", "ann", PROPOSAL)
    assert first.outcome == "running" and first.name == "first" and first.started_by == "ann"
    assert dict(first.changes) == dict(PROPOSAL)
    assert store.shadow() == first and store.shadow_version() > v0
    other = open_handle()
    try:
        _wait(lambda: other.shadow() == first)
        second = other.start_shadow("second", "bob", PROPOSAL[:1])
        assert second.id != first.id
        _wait(lambda: store.shadow() == second)
        sets = store.shadow_sets()
        assert [(s.id, s.name, s.outcome, s.ended_by) for s in sets] == [
            (first.id, "first", "replaced", "bob"), (second.id, "second", "running", None)]
        assert sets[0].ended_ms is not None and sets[0].ended_ms >= first.started_ms
        v = store.shadow_version()
        stopped = store.stop_shadow("carl")
        assert stopped is not None and stopped.id == second.id and stopped.outcome == "stopped"
        assert stopped.ended_by == "carl" and store.shadow() is None and store.shadow_version() > v
        _wait(lambda: other.shadow() is None and other.shadow_sets() == store.shadow_sets())
        assert [s.outcome for s in other.shadow_sets()] == ["replaced", "stopped"]
        assert store.snapshot().entities == {}  # nothing of it was ever enforced
        assert store.changes_since(0) == []
    finally:
        other.close()


def promote_and_rollback(store: Handle, open_handle: Opener, *, one_seq: bool) -> None:
    """``one_seq``: the store writes a promotion as one record whose changes share its seq (kafka://); else each
    change has its own seq, contiguous (SQLite)."""
    _seed(store)
    before = store.snapshot().entities
    with pytest.raises(ShadowStateError, match="no shadow set is running"):
        store.promote_shadow("ann", 0)
    with pytest.raises(ShadowStateError, match="ever promoted"):
        store.rollback("ann", 0)
    shadow = store.start_shadow("proposal", "ann", PROPOSAL)
    seq0 = store.last_seq()
    v0 = store.shadow_version()
    promotion = store.promote_shadow("dora", 1_234_567)
    assert promotion.kind == "promote" and promotion.shadow_id == shadow.id and promotion.by == "dora"
    assert promotion.shadow_name == "proposal" and promotion.effective_ms == 1_234_567
    assert store.shadow_version() > v0 and store.shadow() is None
    assert store.shadow_sets()[-1].outcome == "promoted" and store.shadow_sets()[-1].ended_by == "dora"
    # only the keys it changes: the equal request_percentage is neither applied nor recorded
    assert dict(promotion.applied) == {ALICE: {"producer_byte_rate": 1500.0, "consumer_byte_rate": None},
                                       BOB: {"producer_byte_rate": 300.0}, PREFIX: {"request_percentage": 10.0},
                                       RANGE: {"connection_creation_rate": 20.0}}
    assert dict(promotion.previous) == {ALICE: {"producer_byte_rate": 1000.0, "consumer_byte_rate": 2000.0},
                                        BOB: {"producer_byte_rate": None}, PREFIX: {"request_percentage": None},
                                        RANGE: {"connection_creation_rate": None}}
    changes = store.changes_since(seq0)
    assert {(c.entity, c.key, c.value) for c in changes} == {
        (e, k, v) for e, ops in promotion.applied for k, v in ops.items()}
    assert all(promotion.first_seq <= c.seq <= promotion.last_seq for c in changes)
    # each change carries the instant every gateway applies it; an ordinary alter's apply when read
    assert {c.effective_ms for c in changes} == {1_234_567}
    assert {c.effective_ms for c in store.changes_since(0) if c.seq <= seq0} == {None}
    if one_seq:
        assert promotion.first_seq == promotion.last_seq == changes[0].seq
    else:
        assert [c.seq for c in changes] == list(range(promotion.first_seq, promotion.last_seq + 1))
    assert store.get(ALICE) == {"producer_byte_rate": 1500.0}
    assert store.get(BOB) == {"producer_byte_rate": 300.0} and store.get(RANGE) == {"connection_creation_rate": 20.0}
    assert store.promotions() == [promotion]

    # a later change to a key the promotion set: rollback refused, nothing written
    store.alter([(BOB, {"producer_byte_rate": 333.0})])
    last = store.last_seq()
    refused = r"\{user=bob, client-id=app\} producer_byte_rate: 300\.0 -> 333\.0.*--force"
    with pytest.raises(ShadowStateError, match=refused):
        store.rollback("erin", 0)
    assert store.last_seq() == last and store.promotions() == [promotion]
    # that key back where the promotion put it: allowed
    store.alter([(BOB, {"producer_byte_rate": 300.0})])
    rollback = store.rollback("erin", 7_654_321)
    assert rollback.kind == "rollback" and rollback.shadow_id == shadow.id and rollback.effective_ms == 7_654_321
    assert dict(rollback.applied) == dict(promotion.previous) and dict(rollback.previous) == dict(promotion.applied)
    assert {c.effective_ms for c in store.changes_since(rollback.first_seq - 1)} == {7_654_321}
    assert store.snapshot().entities == before
    other = open_handle()
    try:
        _wait(lambda: other.promotions() == [promotion, rollback])
        assert other.snapshot().entities == before
        assert replay(other.changes_since(0)) == before  # the change log alone rebuilds the state
    finally:
        other.close()
    with pytest.raises(ShadowStateError, match="rolled back already"):
        store.rollback("erin", 0)


def rollbacks_walk_back_and_force(store: Handle) -> None:
    _seed(store)
    store.start_shadow("one", "ann", [(ALICE, {"producer_byte_rate": 1.0})])
    p1 = store.promote_shadow("ann", 0)
    store.start_shadow("two", "ann", [(ALICE, {"producer_byte_rate": 2.0}), (BOB, {"consumer_byte_rate": 9.0})])
    p2 = store.promote_shadow("ann", 0)
    store.alter([(BOB, {"consumer_byte_rate": 10.0})])
    with pytest.raises(ShadowStateError, match="rollback refused"):
        store.rollback("ann", 0)
    forced = store.rollback("ann", 0, force=True)  # restores bob's key over the later change
    assert forced.shadow_id == p2.shadow_id and dict(forced.previous)[BOB] == {"consumer_byte_rate": 10.0}
    assert store.get(ALICE)["producer_byte_rate"] == 1.0 and store.get(BOB) == {}
    second = store.rollback("ann", 0)  # then the promotion before it
    assert second.shadow_id == p1.shadow_id and store.get(ALICE)["producer_byte_rate"] == 1000.0
    assert [(p.kind, p.shadow_id) for p in store.promotions()] == [
        ("promote", p1.shadow_id), ("promote", p2.shadow_id), ("rollback", p2.shadow_id), ("rollback", p1.shadow_id)]


def promotion_is_atomic_to_pollers(store: Handle, open_handle: Opener) -> None:
    """A reader polling ``changes_since`` on another handle, as a gateway does, never sees part of a promotion."""
    proposal = [(QuotaEntity(user=f"tenant-{i:03d}"), {"producer_byte_rate": float(1000 + i),
                                                     "consumer_byte_rate": float(2000 + i)}) for i in range(150)]
    store.start_shadow("big", "ann", proposal)
    reader = open_handle()
    seen: list[list[Change]] = []
    done = threading.Event()

    def poll() -> None:
        seq = reader.last_seq()
        while True:
            finished = done.is_set()
            got = reader.changes_since(seq)
            if got:
                seen.append(got)
                seq = got[-1].seq
            if finished:
                return

    thread = threading.Thread(target=poll)
    try:
        thread.start()
        promotion = store.promote_shadow("ann", 99)
        _wait(lambda: reader.last_seq() >= store.last_seq())
        done.set()
        thread.join(30)
        assert not thread.is_alive()
    finally:
        done.set()
        reader.close()
    inside = [[c for c in batch if promotion.first_seq <= c.seq <= promotion.last_seq] for batch in seen]
    batches = [b for b in inside if b]
    assert len(batches) == 1, [len(b) for b in inside]  # all of it in one poll, never a part
    assert len(batches[0]) == 300 and {c.entity for c in batches[0]} == {e for e, _ in proposal}


def racing_writers(store: Handle, open_handle: Opener) -> None:
    """Two handles promote the same shadow set at once: exactly one promotion happens; the other is refused."""
    _seed(store)
    store.start_shadow("race", "ann", [(ALICE, {"producer_byte_rate": 5.0})])
    other = open_handle()
    try:
        _wait(lambda: other.shadow() is not None)
        outcomes: list[object] = []
        barrier = threading.Barrier(2)

        def promote(handle: Handle, who: str) -> None:
            barrier.wait()
            try:
                outcomes.append(handle.promote_shadow(who, 0))
            except ShadowStateError as e:
                outcomes.append(e)

        threads = [threading.Thread(target=promote, args=(h, w)) for h, w in ((store, "a"), (other, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(type(o).__name__ for o in outcomes) == ["Promotion", "ShadowStateError"], outcomes
        _wait(lambda: len(other.promotions()) == 1)
        assert len(store.promotions()) == 1 and store.get(ALICE)["producer_byte_rate"] == 5.0
        assert [c.key for c in store.changes_since(0) if c.entity == ALICE].count("producer_byte_rate") == 2
    finally:
        other.close()


def replay(changes: list[Change]) -> dict[QuotaEntity, dict[str, float]]:
    out: dict[QuotaEntity, dict[str, float]] = {}
    for c in changes:
        values = out.setdefault(c.entity, {})
        if c.value is None:
            values.pop(c.key, None)
            if not values:
                del out[c.entity]
        else:
            values[c.key] = c.value
    return out


def _wait(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Another handle sees a write within its poll (instant for SQLite, one fetch for kafka://)."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "another handle did not see the write in time"
        time.sleep(0.05)
