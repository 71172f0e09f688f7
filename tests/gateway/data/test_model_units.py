"""Gateway pieces of issue 20 without a broker: excluded principals in the enforcement, KIP-599 permits and merges
of DeleteTopics / CreatePartitions frames, the exclusion setting."""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

import pytest
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.errors import CommandError
from quotaflow.core.keys import UNLIMITED
from quotaflow.engine import StrictControllerMutationQuota
from quotaflow.engine.controller_mutation import PermissiveControllerMutationQuota
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.data import enforcement as enforcement_module
from quotaflow.gateway.data import mutations
from quotaflow.gateway.data.enforcement import Enforcement
from quotaflow.gateway.data.shadow import NEVER
from quotaflow.gateway.wire import protocol
from quotaflow.store.base import Change, Snapshot
from twins import assert_compiled, forms

NOW = 1_700_000_000_000


def _enforcement(excluded: frozenset[str] = frozenset({"ops"})) -> Enforcement:
    e = Enforcement(GatewayConfig(excluded_principals=excluded))
    e.load(Snapshot(1, {QuotaEntity(user=DEFAULT): {"producer_byte_rate": 100.0, "request_percentage": 0.01,
                                                     "controller_mutation_rate": 1.0}}))
    return e


def test_an_excluded_principal_is_never_throttled_and_metered_as_exempt() -> None:
    e = _enforcement()
    for i in range(20):
        assert e.produce("ops", "c", 10_000, 50_000_000, 1, NOW + i).throttle_ms == 0
        assert e.request(3, "ops", "c", 50_000_000, NOW + i) == 0
    assert not e.produce_limited["ops", "c"] and e.produce_limited["tenant", "c"]
    assert e.mutation_quota("ops", "c", 19, 6, NOW) is None and not e.mutations_metered("ops")
    assert e.fetch_max_bytes("ops", "c") is None
    assert e.managers.produce.sensor_count == 0 and e.managers.request.sensor_count == 0  # nothing in any bucket
    assert e.produce("tenant", "c", 10_000, 1_000, 1, NOW).throttle_ms > 0  # the same quota throttles others
    samples = {(s.name, s.tags): s.value for s in e.metric_samples(NOW + 20)}
    assert samples[("excluded-byte-rate", (("user", "ops"),))] > 0
    assert samples[("excluded-request-time", (("user", "ops"),))] > 0
    assert samples[("exempt-request-time", ())] > 0


def test_network_time_weighs_on_the_next_request_only_under_a_request_quota() -> None:
    with_quota = _enforcement(frozenset())
    assert with_quota.request(3, "tenant", "c", 0, NOW) == 0
    with_quota.network_time("tenant", "c", 50_000_000, NOW)  # recorded, never checked itself
    assert with_quota.managers.request.metric_value("tenant", "c", NOW) > 0
    assert with_quota.request(3, "tenant", "c", 0, NOW) > 0  # the next request pays for it
    without = Enforcement(GatewayConfig())
    without.load(Snapshot(1, {QuotaEntity(user=DEFAULT): {"producer_byte_rate": 100.0}}))
    without.network_time("tenant", "c", 50_000_000, NOW)
    assert without.managers.request.sensor_count == 0  # no request quota: nothing to record into
    assert without.request(3, "tenant", "c", 0, NOW) == 0
    # what a connection asks before it calls network_time at all: kept with every change of quotas
    assert with_quota.network_metered and not without.network_metered
    without.apply_changes([Change(2, NOW, QuotaEntity(user="tenant"), "request_percentage", 5.0)])
    assert without.network_metered
    without.apply_changes([Change(3, NOW, QuotaEntity(user="tenant"), "request_percentage", None)])
    assert not without.network_metered
    assert _enforcement().network_metered  # excluded principals' usage is metered even without a quota


def test_make_setup_built_the_compiled_enforcement() -> None:
    assert_compiled(enforcement_module)


@pytest.mark.parametrize("module", forms(enforcement_module))
def test_both_forms_keep_what_a_connection_reads_after_each_response(module: Any) -> None:
    """The facts the compiled connection core reads as C fields (the switch time, the shadow, whether network time
    is metered) are kept alike by the compiled Enforcement and its pure twin, through quota changes and a shadow."""
    e = module.Enforcement(GatewayConfig())
    assert (e.switch_ms, e.shadow, e.network_metered, e.no_throttle) == (NEVER, None, False, None)
    e.apply_changes([Change(2, NOW, QuotaEntity(user="tenant"), "request_percentage", 5.0)])
    assert e.network_metered
    e.apply_changes([Change(3, NOW, QuotaEntity(user="tenant"), "request_percentage", None)])
    assert not e.network_metered
    shadow = module.Enforcement(GatewayConfig(), shadow_id=7)
    shadow.apply_changes([Change(4, NOW, QuotaEntity(user="tenant"), "request_percentage", 5.0)])
    e.set_shadow(shadow)
    assert e.shadow is shadow and e.network_metered  # the shadow's request quota meters network time too
    assert shadow.no_throttle.shadow_id == 7
    e.switch_ms = NOW
    assert e.switch_ms == NOW
    e.set_shadow(None)
    assert e.shadow is None and not e.network_metered


def test_the_decisions_are_the_same_with_and_without_excluded_principals() -> None:
    """Without exclusions the produce and fetch decisions are the engine's functions bound to the managers; with
    them, methods that set the excluded aside first: a principal not excluded gets the very same decisions."""
    quotas = {QuotaEntity(user=DEFAULT): {"producer_byte_rate": 5000.0, "consumer_byte_rate": 4000.0,
                                          "request_percentage": 1.0}}
    bound, checked = Enforcement(GatewayConfig()), Enforcement(GatewayConfig(excluded_principals=frozenset({"ops"})))
    for e in (bound, checked):
        e.load(Snapshot(1, quotas))
    assert isinstance(bound.produce, partial) and not isinstance(checked.produce, partial)
    throttled = 0
    for i in range(60):
        now, size, thread_ns = NOW + 37 * i, 700 + 97 * i, 90_000 * (i % 7)
        decisions = [(e.produce("tenant", "c", size, thread_ns, i % 3 - 1, now),
                      e.fetch("tenant", "c", size * 2, thread_ns, now)) for e in (bound, checked)]
        assert decisions[0] == decisions[1]
        throttled += sum(d.throttle_ms > 0 for d in decisions[0])
    assert throttled > 10  # the quotas were met, not only stayed under


def test_produce_limited_follows_every_change_of_quotas() -> None:
    """The one-produce-at-a-time question is remembered per (user, client-id): each change must be seen at once."""
    e = Enforcement(GatewayConfig(excluded_principals=frozenset({"ops"})))
    e.load(Snapshot(1, {}))
    assert not e.produce_limited["tenant", "c"]
    e.apply_changes([Change(2, NOW, QuotaEntity(client_id="c"), "producer_byte_rate", 100.0)])
    assert e.produce_limited["tenant", "c"] and not e.produce_limited["tenant", "d"]
    assert not e.produce_limited["ops", "c"]  # excluded: never read one at a time
    # a user quota takes precedence over a client-id one (KIP-55): Long.MAX_VALUE is unlimited
    e.apply_changes([Change(3, NOW, QuotaEntity(user="tenant"), "producer_byte_rate", UNLIMITED)])
    assert not e.produce_limited["tenant", "c"] and e.produce_limited["other", "c"]
    e.apply_changes([Change(4, NOW, QuotaEntity(user="tenant"), "producer_byte_rate", None)])
    assert e.produce_limited["tenant", "c"]
    e.apply_changes([Change(5, NOW, QuotaEntity(client_id="c"), "producer_byte_rate", None)])
    assert not e.produce_limited["tenant", "c"] and not e.produce_limited["other", "c"]


def test_the_exclusion_setting() -> None:
    config = GatewayConfig.from_properties({"quotaflow.quota.excluded.principals": "User:ops; User:replicator"})
    assert config.excluded_principals == {"ops", "replicator"}
    with pytest.raises(CommandError, match="each principal must be User:<name>"):
        GatewayConfig.from_properties({"quotaflow.quota.excluded.principals": "Group:ops"})


def _header(frame: bytes) -> protocol.RequestHeader:
    return protocol.parse_request_header(frame)


def _frame(request: object) -> bytes:
    request.with_header(correlation_id=7, client_id="creator")  # type: ignore[attr-defined]
    return bytes(request.encode(header=True))  # type: ignore[attr-defined]


def _strict(quota: float = 2.0, samples: int = 2) -> StrictControllerMutationQuota:
    e = Enforcement(GatewayConfig(controller_quota_window_num=samples, controller_quota_window_size_seconds=1))
    e.load(Snapshot(1, {QuotaEntity(client_id="creator"): {"controller_mutation_rate": quota}}))
    q = e.mutation_quota("u", "creator", 20, 6, NOW)
    assert isinstance(q, StrictControllerMutationQuota)
    return q


def test_delete_topics_v6_by_id_and_name_costs_partitions() -> None:
    ids = [uuid.uuid4(), uuid.uuid4()]
    state = DeleteTopicsRequest.DeleteTopicState
    frame = _frame(DeleteTopicsRequest[6](topics=[state(name="a", topic_id=uuid.UUID(int=0)),
                                                  state(name=None, topic_id=ids[0]),
                                                  state(name=None, topic_id=ids[1]),
                                                  state(name="unknown", topic_id=uuid.UUID(int=0))],
                                          timeout_ms=1000))
    header = _header(frame)
    assert mutations.count_requests(frame, header) == (["a", "unknown"], ids)
    counts = {("a", None): 3, (None, ids[0]): 3, (None, ids[1]): 3}
    decision = mutations.decide(frame, header, _strict(), NOW, lambda n, i: counts.get((n, i)))
    # 4 permits: a (3, 1 left), ids[0] (3, -2), ids[1] refused, the unknown topic costs nothing and passes on
    assert [(r.name, r.topic_id) for r in decision.refused] == [(None, ids[1])]
    assert decision.quota.throttle_time(NOW) == 1000  # Kafka's -tokens / quota x 1000 = 2 / 2 x 1000
    forwarded = protocol.decode_request(decision.forward or b"", header)
    assert [t.name or t.topic_id for t in forwarded.topics] == ["a", ids[0], "unknown"]
    upstream = DeleteTopicsResponse[6](throttle_time_ms=0, responses=[])
    upstream.with_header(correlation_id=7)
    merged = mutations.merge_response(bytes(upstream.encode(header=True)), 20, 6, decision.refused, 1000)
    answer = DeleteTopicsResponse.decode(merged[4:], version=6, header=True)  # framed for the client
    assert answer.throttle_time_ms == 1000
    assert [(r.topic_id, r.error_code) for r in answer.responses] == [(ids[1], 89)]


def test_create_partitions_costs_the_new_partitions_only() -> None:
    t = CreatePartitionsRequest.CreatePartitionsTopic
    frame = _frame(CreatePartitionsRequest[3](topics=[t(name="a", count=3, assignments=None),
                                                      t(name="b", count=1, assignments=None),
                                                      t(name="c", count=9, assignments=None)],
                                              timeout_ms=1000, validate_only=False))
    header = _header(frame)
    counts = {"a": 1, "b": 1, "c": 1}
    decision = mutations.decide(frame, header, _strict(), NOW, lambda n, _i: counts.get(n or ""))
    # a adds 2 (2 left), b adds none, c adds 8 (passes the check, -6)
    assert decision.refused == [] and decision.forward == frame
    again = mutations.decide(frame, header, decision.quota, NOW, lambda n, _i: counts.get(n or ""))
    assert [r.name for r in again.refused] == ["a", "c"]  # in debt: every topic that costs something is refused
    local = mutations.local_response(37, 3, 7, again.refused)
    answer = CreatePartitionsResponse.decode(local[4:], version=3, header=True)
    assert [(r.name, r.error_code) for r in answer.results] == [("a", 89), ("c", 89)]


def test_permissive_versions_never_refuse() -> None:
    e = Enforcement(GatewayConfig(controller_quota_window_num=2, controller_quota_window_size_seconds=1))
    e.load(Snapshot(1, {QuotaEntity(client_id="creator"): {"controller_mutation_rate": 1.0}}))
    q = e.mutation_quota("u", "creator", 20, 4, NOW)
    assert isinstance(q, PermissiveControllerMutationQuota)
    frame = _frame(DeleteTopicsRequest[4](topic_names=["a", "b"], timeout_ms=1000))
    decision = mutations.decide(frame, _header(frame), q, NOW, lambda _n, _i: 5)
    assert decision.refused == [] and q.throttle_time(NOW) > 0


def test_partition_counts_forget_what_the_upstream_cannot_answer() -> None:
    import asyncio

    from quotaflow.gateway.data.partition_counts import PartitionCounts

    async def unreachable() -> Any:
        raise OSError("connection refused")

    async def old_metadata() -> list[tuple[int, int, int]]:
        return [(3, 0, 3)]  # Metadata v3 could auto-create the topics it names: never asked

    async def modern() -> list[tuple[int, int, int]]:
        return [(3, 0, 12)]

    counts = PartitionCounts(unreachable, modern)
    counts.by_name["a"] = 3  # from an earlier answer: a refresh that fails must not keep it
    asyncio.run(counts.refresh(["a"]))
    assert counts.count("a") is None
    old = PartitionCounts(unreachable, old_metadata)
    asyncio.run(old.refresh(["a"]))
    assert old.count("a") is None and old.count(None, uuid.uuid4()) is None
