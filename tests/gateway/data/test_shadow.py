"""Shadow quotas at the gateway (issue 36), without sockets: the shadow's quotas (enforced + its changes), its
managers fed the same inputs as the live ones and never applied, its event-log row and metrics, the connection
shadow, and a promotion held until its effective time."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from kafka.protocol.api_key import ApiKey

from quotaflow.core.entities import QuotaEntity
from quotaflow.core.errors import ConnectionThrottledError
from quotaflow.engine.connection import ConnectionQuotaConfig
from quotaflow.events import REQUESTS_DIR, SHADOW_REQUEST_FIELDS, dataset_files, read_dataset
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.data.api_handlers import HANDLERS, decide_shadow
from quotaflow.gateway.data.broker_quotas import BrokerQuotas
from quotaflow.gateway.data.pending import Pending, request_row
from quotaflow.gateway.data.shadow import NEVER, PendingSwitch, overrides_of, passed_on, shadow_entities
from quotaflow.gateway.observation.connection_events import ObservedConnectionQuotas
from quotaflow.gateway.observation.eventlog import REQUEST_LOG_SCHEMA, SHADOW_REQUEST_LOG_SCHEMA, EventLog
from quotaflow.gateway.shadow_follower import ShadowFollower
from quotaflow.gateway.wire.protocol import RequestHeader
from quotaflow.store.base import Change, Promotion, ShadowSet, Snapshot

NOW = 1_700_000_000_000
PROD = QuotaEntity(client_id="p")
CONS = QuotaEntity(client_id="c")
CONFIG = GatewayConfig(quota_window_num=2, quota_window_size_seconds=1)


def _shadow(changes: Sequence[tuple[QuotaEntity, dict[str, float | None]]], shadow_id: int = 7) -> ShadowSet:
    return ShadowSet(shadow_id, "tighter", "ops", NOW, tuple(changes))


def _quotas(entities: dict[QuotaEntity, dict[str, float]]) -> BrokerQuotas:
    quotas = BrokerQuotas(CONFIG)
    quotas.load(Snapshot(1, entities))
    return quotas


def _produce(client_id: str, size: int) -> Pending:
    pending = Pending(RequestHeader(ApiKey.Produce, 9, 1, client_id, 0), size, NOW)
    pending.acks = 1
    pending.forwarded = True
    return pending


def _decide(enforcement: object, pending: Pending, now: int) -> None:
    handler = HANDLERS[pending.header.api_key]
    pending.handler = handler
    pending.decisions = handler.decide(enforcement, pending, b"", "alice", pending.header.client_id or "",  # type: ignore[arg-type]
                                       pending.thread_ns, now)
    shadow = enforcement.shadow  # type: ignore[attr-defined]
    if shadow is not None:
        pending.shadow = decide_shadow(shadow, pending, b"", "alice", now)


def test_the_shadow_quotas_are_the_enforced_ones_with_its_changes_applied() -> None:
    enforced = {PROD: {"producer_byte_rate": 1e6, "request_percentage": 50.0}, CONS: {"consumer_byte_rate": 1e6}}
    overrides = overrides_of([(PROD, {"producer_byte_rate": 1e3, "request_percentage": None}),
                              (QuotaEntity(user="u"), {"request_percentage": 5.0})])
    assert shadow_entities(enforced, overrides) == {
        PROD: {"producer_byte_rate": 1e3}, CONS: {"consumer_byte_rate": 1e6},
        QuotaEntity(user="u"): {"request_percentage": 5.0}}
    assert enforced[PROD] == {"producer_byte_rate": 1e6, "request_percentage": 50.0}  # untouched
    changes = [Change(2, NOW, PROD, "producer_byte_rate", 5.0), Change(3, NOW, PROD, "consumer_byte_rate", 9.0),
               Change(4, NOW, CONS, "consumer_byte_rate", None)]
    assert [c.seq for c in passed_on(changes, overrides)] == [3, 4]  # the shadow's own key keeps its value


def test_the_shadow_decides_the_same_requests_and_only_the_live_decision_is_applied() -> None:
    quotas = _quotas({PROD: {"producer_byte_rate": 1e9}})
    live = quotas.for_broker("1")
    quotas.start_shadow(_shadow([(PROD, {"producer_byte_rate": 10_000.0})]))
    assert live.shadow is not None and live.shadow.shadow_id == 7
    rows = []
    for i in range(5):
        pending = _produce("p", 20_000)
        _decide(live, pending, NOW + i)
        rows.append(request_row("1", "PLAINTEXT", "alice", "127.0.0.1", pending, 10, NOW + i, i))
    assert all(r[18] == 0 for r in rows)  # live: nothing throttled
    shadow_total = [r[23] for r in rows]
    assert all(len(r) == len(SHADOW_REQUEST_LOG_SCHEMA) for r in rows) and {r[19] for r in rows} == {7}
    assert shadow_total[-1] > 0 and [r[20] for r in rows] == shadow_total  # the producer quota's throttle
    # an enforced change reaches the shadow unless the shadow sets that key
    quotas.apply_changes([Change(2, NOW, PROD, "producer_byte_rate", 5.0),
                          Change(3, NOW, CONS, "consumer_byte_rate", 1_000.0)])
    assert live.managers.produce.quota_limit("alice", "p") == 5.0
    assert live.shadow.managers.produce.quota_limit("alice", "p") == 10_000.0
    assert live.shadow.managers.fetch.quota_limit("alice", "c") == 1_000.0
    samples = {(s.group, s.name) for s in quotas.metric_samples(NOW + 10)}
    assert ("ShadowProduce", "byte-rate") in samples and ("Shadow", "throttled-requests-total") in samples
    counted = [s for s in quotas.metric_samples(NOW + 10) if s.name == "throttled-requests-total"]
    assert counted[0].value == sum(1 for t in shadow_total if t) and ("shadow_id", "7") in counted[0].tags
    # a broker seen for the first time while the shadow runs gets one too; stopping ends every one
    assert quotas.for_broker("2").shadow is not None
    quotas.stop_shadow()
    pending = _produce("p", 20_000)
    _decide(live, pending, NOW + 20)
    assert pending.shadow is None and len(request_row("1", "L", "a", "ip", pending, 0, NOW, 9)) == len(
        REQUEST_LOG_SCHEMA)


def test_a_fetch_is_decided_in_shadow_on_the_response_as_it_was_answered() -> None:
    quotas = _quotas({})
    live = quotas.for_broker("1")
    quotas.start_shadow(_shadow([(CONS, {"consumer_byte_rate": 1_000.0})]))
    pending = Pending(RequestHeader(ApiKey.Fetch, 12, 1, "c", 0), 100, NOW)
    pending.forwarded = True
    pending.response = b"x" * 50_000  # what the live decision left (cut)
    _decide(live, pending, NOW)
    _decide(live, pending, NOW + 1)
    assert pending.decisions.throttle_ms == 0 and pending.response is not None and len(pending.response) == 50_000
    assert pending.shadow.throttle_ms_fetch > 0 and not pending.oversized
    assert live.shadow is not None
    assert live.shadow.managers.fetch.quota_limit("alice", "c") == 1_000.0


def test_the_shadow_request_quota_meets_the_same_thread_time_and_network_time() -> None:
    quotas = _quotas({})
    live = quotas.for_broker("1")
    assert not live.network_metered
    quotas.start_shadow(_shadow([(QuotaEntity(user="alice"), {"request_percentage": 1.0})]))
    assert live.network_metered  # the shadow has a request quota: network time is recorded (into it only)
    throttled = 0
    for i in range(20):
        pending = Pending(RequestHeader(ApiKey.Metadata, 12, 1, "m", 0), 100, NOW + i * 10)
        pending.thread_ns = 5_000_000
        _decide(live, pending, NOW + i * 10)
        live.network_time("alice", "m", 2_000_000, NOW + i * 10)
        throttled += pending.shadow.throttle_ms_request > 0
        assert pending.decisions.throttle_ms == 0
    assert throttled > 0
    assert not live.managers.request.quotas_enabled


def test_the_connection_shadow_counts_what_its_ip_rate_would_have_refused() -> None:
    rows: list[dict[str, object]] = []
    quotas = ObservedConnectionQuotas(ConnectionQuotaConfig(quota_window_num=2, quota_window_size_seconds=1),
                                      rows.append)
    quotas.add_listener("PLAINTEXT")
    shadow = quotas.start_shadow(9)
    shadow.update_ip_connection_rate_quota("127.0.0.1", 2)
    for i in range(6):
        now = NOW + i
        assert quotas.record_connection_and_get_throttle_ms("PLAINTEXT", now) == 0
        quotas.record_ip_connection_maybe_throttle("PLAINTEXT", "127.0.0.1", now)  # live: never refused
    assert {r["result"] for r in rows} == {"ACCEPTED"} and {r["shadow_id"] for r in rows} == {9}
    refused = [r for r in rows if r["shadow_result"] == "IP_THROTTLED"]
    assert refused and all(int(r["shadow_ip_throttle_ms"]) > 0 for r in refused)  # type: ignore[call-overload]
    counts = {s.tags: s.value for s in quotas.metric_samples(NOW + 10) if s.group == "Shadow"}
    assert counts == {(("result", "refused"), ("listener", "PLAINTEXT"), ("shadow_id", "9")): len(refused)}
    quotas.stop_shadow()
    quotas.record_connection_and_get_throttle_ms("PLAINTEXT", NOW + 100)
    quotas.record_ip_connection_maybe_throttle("PLAINTEXT", "127.0.0.1", NOW + 100)
    assert "shadow_id" not in rows[-1]
    with pytest.raises(ConnectionThrottledError):  # the live quotas were never touched by the shadow's
        quotas.update_ip_connection_rate_quota("127.0.0.1", 1)
        for i in range(5):
            quotas.record_connection_and_get_throttle_ms("PLAINTEXT", NOW + 200 + i)
            quotas.record_ip_connection_maybe_throttle("PLAINTEXT", "127.0.0.1", NOW + 200 + i)


def test_shadow_rows_are_files_of_their_own_that_readers_read_with_the_others(tmp_path: Path) -> None:
    quotas = _quotas({})
    live = quotas.for_broker("1")
    with EventLog(tmp_path, "gw") as log:
        plain = _produce("p", 10)
        _decide(live, plain, NOW)
        log.request_rows.append(request_row("1", "L", "alice", "127.0.0.1", plain, 0, NOW, log.next_seq()))
        log.flush()
        quotas.start_shadow(_shadow([(PROD, {"producer_byte_rate": 1.0})]))
        for i in range(2):
            shadowed = _produce("p", 10_000)
            _decide(live, shadowed, NOW + 1 + i)
            log.shadow_request_rows.append(request_row("1", "L", "alice", "127.0.0.1", shadowed, 0, NOW + 1 + i,
                                                       log.next_seq()))
    schemas = {pq.read_schema(f).remove_metadata() for f in dataset_files(tmp_path / REQUESTS_DIR)}
    assert schemas == {REQUEST_LOG_SCHEMA, SHADOW_REQUEST_LOG_SCHEMA}
    table = read_dataset(tmp_path, REQUESTS_DIR)
    assert table is not None
    got = table.sort_by("seq").to_pylist()
    assert [g["shadow_id"] for g in got] == [None, 7, 7]
    assert got[0]["shadow_throttle_ms"] is None and got[2]["shadow_throttle_ms_produce"] > 0
    assert all(f.name in table.column_names for f in SHADOW_REQUEST_FIELDS)


class _Store:
    """The ShadowStore protocol over a dict (the follower only reads it)."""

    def __init__(self) -> None:
        self.version = 0
        self.running: ShadowSet | None = None
        self.history: list[Promotion] = []

    def shadow(self) -> ShadowSet | None:
        return self.running

    def shadow_version(self) -> int:
        return self.version

    def promotions(self) -> list[Promotion]:
        return list(self.history)

    def start_shadow(self, *_a: object) -> ShadowSet:
        raise NotImplementedError

    stop_shadow = promote_shadow = rollback = start_shadow

    def shadow_sets(self) -> list[ShadowSet]:
        return []


def test_a_promotion_is_held_until_its_effective_time_then_applied_at_the_first_decision_after_it() -> None:
    async def run() -> None:
        clock = [NOW]
        store = _Store()
        quotas = _quotas({PROD: {"producer_byte_rate": 1e9}})
        live = quotas.for_broker("1")
        switched: list[bool] = []
        follower = ShadowFollower(store, quotas, ObservedConnectionQuotas(), lambda: clock[0],  # type: ignore[arg-type]
                                  switched.append)
        shadow = _shadow([(PROD, {"producer_byte_rate": 1_000.0})])
        store.running, store.version = shadow, 1
        assert await follower.update(follower.read(), []) == []
        assert live.shadow is not None and switched == [True]
        batch = [Change(5, NOW, PROD, "producer_byte_rate", 1_000.0)]
        later = [Change(6, NOW, CONS, "consumer_byte_rate", 9.0)]
        promotion = Promotion(5, "promote", 7, "tighter", "ops", NOW, NOW + 5_000, 5, 5, (), ())
        store.running, store.history, store.version = None, [promotion], 2
        assert await follower.update(follower.read(), [*batch, *later]) == []  # held, the later one too
        assert live.switch_ms == NOW + 5_000 and live.shadow is not None  # the promoted shadow still runs
        assert live.managers.produce.quota_limit("alice", "p") == 1e9
        clock[0] = NOW + 4_999
        assert await follower.update(follower.read(), []) == []
        assert live.managers.produce.quota_limit("alice", "p") == 1e9
        live.switch(NOW + 5_000)  # what the first decision at or after effective_ms does
        assert live.managers.produce.quota_limit("alice", "p") == 1_000.0
        assert live.managers.fetch.quota_limit("alice", "c") == 9.0
        assert live.shadow is None and switched == [True, False] and live.switch_ms == NEVER
        assert [(s.promotion.id, s.applied_ms, s.late_ms) for s in follower.switched] == [(5, NOW + 5_000, 0)]
        # a reader that sees a batch after its effective time applies it at once and says how late
        rollback = Promotion(6, "rollback", 7, "tighter", "ops", NOW, NOW + 6_000, 7, 7, (), ())
        store.history, store.version = [promotion, rollback], 3
        clock[0] = NOW + 6_250
        assert await follower.update(follower.read(), [Change(7, NOW, PROD, "producer_byte_rate", 1e9)]) == []
        assert live.managers.produce.quota_limit("alice", "p") == 1e9
        assert follower.switched[-1].late_ms == 250
        follower.close()

    asyncio.run(run())


def test_pending_switch_applies_batches_in_log_order() -> None:
    pending = PendingSwitch()
    pending.waiting.append(Promotion(1, "promote", 1, "s", "o", NOW, NOW + 10, 3, 4, (), ()))
    changes = [Change(s, NOW, PROD, "producer_byte_rate", float(s)) for s in range(1, 7)]
    assert [c.seq for c in pending.split(changes)] == [1, 2]
    assert pending.due(NOW + 9) == ([], [])
    applied, done = pending.due(NOW + 10)
    assert [c.seq for c in applied] == [3, 4, 5, 6] and [p.id for p in done] == [1]
    assert pending.effective_ms == NEVER and pending.split(changes[:1]) == changes[:1]


def test_a_gateway_starting_during_the_grace_keeps_the_old_values_until_the_effective_time(tmp_path: Path) -> None:
    """The store shows a promotion's values at once; a gateway that loads it before ``effective_ms`` still switches
    at ``effective_ms`` with the rest of the fleet."""
    from quotaflow.store import open_store

    async def run() -> None:
        with open_store(tmp_path / "q.db") as store:
            store.alter([(PROD, {"producer_byte_rate": 1e9})])
            store.start_shadow("tighter", "ops", [(PROD, {"producer_byte_rate": 1_000.0})])
            promotion = store.promote_shadow("ops", NOW + 60_000)
            snapshot = store.snapshot()
            assert snapshot.entities[PROD] == {"producer_byte_rate": 1_000.0}
            quotas = BrokerQuotas(CONFIG)
            quotas.load(snapshot)
            live = quotas.for_broker("1")
            clock = [NOW]
            follower = ShadowFollower(store, quotas, ObservedConnectionQuotas(), lambda: clock[0], lambda _on: None)
            await follower.start(snapshot.seq)
            assert live.managers.produce.quota_limit("alice", "p") == 1e9  # the old value until effective_ms
            assert live.switch_ms == NOW + 60_000
            live.switch(NOW + 60_000)
            assert live.managers.produce.quota_limit("alice", "p") == 1_000.0
            assert [s.promotion.id for s in follower.switched] == [promotion.id]
            follower.close()

    asyncio.run(run())


def test_every_decide_hook_has_a_shadow_twin() -> None:
    from quotaflow.gateway.data.api_handlers import _SHADOW_HOOKS, DEFAULT

    assert {h.decide for h in [*HANDLERS.values(), DEFAULT]} <= set(_SHADOW_HOOKS)


def test_the_connection_shadow_counts_the_connections_its_listener_rate_delays() -> None:
    config = ConnectionQuotaConfig(quota_window_num=2, quota_window_size_seconds=1, listener_rates={"PLAINTEXT": 2})
    rows: list[dict[str, object]] = []
    quotas = ObservedConnectionQuotas(config, rows.append)
    quotas.add_listener("PLAINTEXT")
    quotas.start_shadow(3)
    for i in range(4):
        delay = quotas.record_connection_and_get_throttle_ms("PLAINTEXT", NOW + i)
        quotas.record_ip_connection_maybe_throttle("PLAINTEXT", "127.0.0.1", NOW + i + delay)
    assert [r["shadow_accept_delay_ms"] for r in rows] == [r["accept_delay_ms"] for r in rows]  # same settings
    delayed = sum(1 for r in rows if int(r["shadow_accept_delay_ms"]) > 0)  # type: ignore[call-overload]
    assert delayed > 0
    counts = {s.tags: s.value for s in quotas.metric_samples(NOW + 10) if s.group == "Shadow"}
    assert counts == {(("result", "delayed"), ("listener", "PLAINTEXT"), ("shadow_id", "3")): delayed}


def test_a_principals_connection_rate_in_shadow_is_counted_and_never_applied() -> None:
    quotas = ObservedConnectionQuotas(ConnectionQuotaConfig(quota_window_num=2, quota_window_size_seconds=1))
    quotas.start_shadow(4).update_principal_connection_rate_quota("alice", 1)
    throttles = [quotas.record_principal_connection_and_get_throttle_ms("alice", NOW + i) for i in range(4)]
    assert throttles == [0, 0, 0, 0]  # the live quotas have no such rate
    counts = {s.tags: s.value for s in quotas.metric_samples(NOW + 10) if s.group == "Shadow"}
    refused = counts[(("result", "refused"), ("listener", ""), ("shadow_id", "4"))]
    assert 0 < refused < 4
