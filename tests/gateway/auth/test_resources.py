"""Resources found in Kafka's message definitions, the rule table over them, and the offered versions that follow;
Produce's and Fetch's compiled name walk held equal to kafka-python's full decode."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.api_key import ApiKey

from quotaflow.gateway.auth import authorize, resources, rules, topic_names
from quotaflow.gateway.data import versions
from quotaflow.gateway.wire import protocol

MODES = [{"sasl_passthrough": p, "authorizer": a} for p in (False, True) for a in (False, True)]


def _paths(api: int, version: int) -> dict[str, str]:
    return {f.path: f.kind for f in resources.fields_at(protocol.REQUESTS[api], version)}


def test_the_fields_that_name_resources_come_from_kafkas_definitions() -> None:
    assert _paths(ApiKey.DeleteTopics, 5) == {"TopicNames": "topicName"}
    assert _paths(ApiKey.DeleteTopics, 6) == {"Topics.Name": "topicName", "Topics.TopicId": resources.TOPIC_ID}
    assert _paths(ApiKey.Produce, 13) == {"TransactionalId": "transactionalId", "TopicData.TopicId": "topicId"}
    assert _paths(ApiKey.Fetch, 13)["Topics.TopicId"] == resources.TOPIC_ID
    assert _paths(ApiKey.Fetch, 12)["Topics.Topic"] == "topicName"
    assert _paths(ApiKey.OffsetFetch, 8) == {"Groups.GroupId": "groupId", "Groups.Topics.Name": "topicName"}
    assert _paths(ApiKey.FindCoordinator, 4) == {"CoordinatorKeys": resources.COORDINATOR_KEY}
    assert _paths(ApiKey.DescribeConfigs, 4) == {"Resources.ResourceName": resources.CONFIG_RESOURCE}
    assert _paths(ApiKey.AddPartitionsToTxn, 4)["Transactions.Topics.Name"] == "topicName"
    # a version outside the definition has no fields, and no definition gives no versions
    assert resources.valid_versions(protocol.REQUESTS[ApiKey.ListOffsets]) == (1, 11)
    assert resources.valid_versions(None) is None


def test_every_rule_row_names_fields_its_api_has_and_every_planner_has_a_row() -> None:
    for key in authorize.PLANNERS:
        assert key in rules.RULES, protocol.api_name(key)
    for key, rule in rules.RULES.items():
        cls = protocol.REQUESTS[key]
        known = {f.path for f in resources.resource_fields(cls)}
        assert set(rule.covers) <= known, (protocol.api_name(key), set(rule.covers) - known)


def test_versions_with_fields_no_rule_covers_are_not_offered() -> None:
    # topic ids (KIP-516) and the brokers' batched AddPartitionsToTxn: not read, so not offered
    assert rules.covered_range(ApiKey.DeleteTopics) == (1, 5)
    assert rules.covered_range(ApiKey.Produce) == (3, 12)
    assert rules.covered_range(ApiKey.Fetch) == (4, 12)
    assert rules.covered_range(ApiKey.OffsetCommit) == (2, 9)
    assert rules.covered_range(ApiKey.OffsetFetch) == (1, 9)
    assert rules.covered_range(ApiKey.AddPartitionsToTxn) == (0, 3)
    assert rules.uncovered(ApiKey.DeleteTopics, 6) and not rules.uncovered(ApiKey.DeleteTopics, 5)
    # an API without a row (WriteTxnMarkers, an inter-broker API) or without a definition is not offered
    assert rules.covered_range(ApiKey.WriteTxnMarkers) is None and rules.covered_range(71) is None
    for mode in MODES:
        assert versions.offered(ApiKey.WriteTxnMarkers, **mode) is None and versions.offered(71, **mode) is None


@pytest.mark.parametrize("mode", MODES)
def test_every_offered_forwarded_version_has_every_resource_field_covered(mode: dict[str, bool]) -> None:
    for key in range(versions.GATE_KEYS):
        found = versions.offered(key, **mode)
        if found is None or (key in versions.GATEWAY_APIS and not (mode["sasl_passthrough"]
                                                                   and key in versions.PASSTHROUGH_APIS)):
            continue  # answered by the gateway itself
        for version in range(found[0], found[1] + 1):
            assert not rules.uncovered(key, version), (protocol.api_name(key), version)


# -- the compiled name walk of the data path against the full decode ----------------------------------------------

_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1,
                 max_size=60)
_TOPICS = st.lists(st.tuples(_NAMES, st.lists(st.integers(0, 1 << 20), max_size=3)), max_size=5)


def _encoded(api: int, version: int, **fields: Any) -> tuple[protocol.RequestHeader, bytes]:
    message = protocol.REQUESTS[api][version](**fields)
    message.with_header(correlation_id=7, client_id="c")
    frame = bytes(message.encode(header=True))
    return protocol.parse_request_header(frame), frame


def _offered(api: int) -> list[int]:
    lo, hi = versions.offered(api, authorizer=True) or (1, 0)
    return list(range(lo, hi + 1))


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(_offered(ApiKey.Produce)), transactional_id=st.none() | _NAMES, topics=_TOPICS)
def test_the_produce_name_walk_reads_what_a_full_decode_reads(version: int, transactional_id: str | None,
                                                              topics: list[tuple[str, list[int]]]) -> None:
    cls = protocol.REQUESTS[ApiKey.Produce]
    data = cls.TopicProduceData
    header, frame = _encoded(ApiKey.Produce, version, transactional_id=transactional_id, acks=-1, timeout_ms=10,
                             topic_data=[data(name=n, partition_data=[
                                 data.PartitionProduceData(index=p, records=None) for p in parts])
                                 for n, parts in topics])
    decoded = protocol.decode_request(frame, header)
    assert topic_names.produce_topics(frame, header) == (decoded.transactional_id,
                                                         [t.name for t in decoded.topic_data])


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(_offered(ApiKey.Fetch)), topics=_TOPICS, forgotten=_TOPICS,
       session=st.tuples(st.integers(0, 5), st.integers(-1, 3)))
def test_the_fetch_name_walk_reads_what_a_full_decode_reads(version: int, topics: list[tuple[str, list[int]]],
                                                            forgotten: list[tuple[str, list[int]]],
                                                            session: tuple[int, int]) -> None:
    cls = protocol.REQUESTS[ApiKey.Fetch]
    part = cls.FetchTopic.FetchPartition
    header, frame = _encoded(
        ApiKey.Fetch, version, replica_id=-1, max_wait_ms=10, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=session[0], session_epoch=session[1], rack_id="r",
        topics=[cls.FetchTopic(topic=n, partitions=[part(partition=p, current_leader_epoch=-1, fetch_offset=5,
                                                         log_start_offset=-1, partition_max_bytes=1 << 20)
                                                    for p in parts]) for n, parts in topics],
        forgotten_topics_data=[cls.ForgottenTopic(topic=n, partitions=parts) for n, parts in forgotten])
    decoded = protocol.decode_request(frame, header)
    assert topic_names.fetch_topics(frame, header) == [t.topic for t in decoded.topics]
