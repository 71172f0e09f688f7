"""Per-API authorization at the gateway (gateway.auth.authorize), over real encoded requests and responses: what
each API needs (AUTHORIZER.md's table, KafkaApis), the refused parts answered with Kafka's per-resource errors and the
rest forwarded, the response merged; quotaflow's own topics refused to everyone; the hot path read without a
decode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from kafka.protocol.api_key import ApiKey

from quotaflow.core.acl import AclOperation as Op
from quotaflow.core.acl import ResourceType as Rt
from quotaflow.core.errors import InvalidRequestError
from quotaflow.gateway.auth import authorize, topic_names
from quotaflow.gateway.auth.authz_audit import AuthzAudit
from quotaflow.gateway.auth.hidden_topics import HiddenTopics, hidden_topics_for
from quotaflow.gateway.wire import protocol

from ..memory_authorizer import Acl, MemoryAuthorizer

STORE = "qf-store"  # a configured store topic (not under the reserved prefix)
HIDDEN = HiddenTopics({STORE, "__quotaflow_usage"})


@dataclass
class Scope:
    principal: str


def _frame(api: int, version: int, **fields: Any) -> tuple[protocol.RequestHeader, bytes]:
    message = protocol.REQUESTS[api][version](**fields)
    message.with_header(correlation_id=7, client_id="c")
    frame = bytes(message.encode(header=True))
    return protocol.parse_request_header(frame), frame


def _access(authorizer: MemoryAuthorizer | None, rows: list[dict[str, Any]] | None = None) -> authorize.Access:
    return authorize.Access(authorizer, HIDDEN, AuthzAudit(rows.append if rows is not None else None))


def _plan(access: authorize.Access, api: int, version: int, principal: str = "bob",
          **fields: Any) -> tuple[authorize.Plan | None, protocol.RequestHeader]:
    header, frame = _frame(api, version, **fields)
    return authorize.plan(access, Scope(principal), header, frame, "10.0.0.9"), header  # type: ignore[arg-type]


def _forwarded(plan: authorize.Plan, header: protocol.RequestHeader) -> Any:
    assert plan.forward is not None
    return protocol.decode_request(plan.forward, header)


def _local(plan: authorize.Plan, header: protocol.RequestHeader) -> Any:
    assert plan.forward is None and plan.local
    return protocol.decode_response(plan.local[4:], header.api_key, header.api_version)


def _response(api: int, version: int, **fields: Any) -> Any:
    return protocol.response_class(api, version)(**fields)


def _produce_topic(name: str, partitions: tuple[int, ...] = (0,)) -> Any:
    cls = protocol.REQUESTS[ApiKey.Produce]
    return cls.TopicProduceData(name=name, partition_data=[
        cls.TopicProduceData.PartitionProduceData(index=p, records=b"r" * 10) for p in partitions])


BOB_WRITES_BOB = Acl("User:bob", Op.WRITE, Rt.TOPIC, "bob-", prefixed=True)


# -- hidden topics ---------------------------------------------------------------------------------------------

def test_hidden_topics_are_the_configured_names_and_the_reserved_prefix() -> None:
    assert STORE in HIDDEN and "__quotaflow_usage" in HIDDEN and "__quotaflow_anything" in HIDDEN
    assert "quotaflow" not in HIDDEN and "orders" not in HIDDEN and None not in HIDDEN
    assert HIDDEN.may_name(b"xx" + STORE.encode() + b"yy") and HIDDEN.may_name(b"..__quotaflow..")
    assert not HIDDEN.may_name(b"orders and payments")


@pytest.mark.parametrize("names", [(), ("__quotaflow_usage", "__quotaflow_store"), ("__quotaflow_usage", "store")])
def test_may_name_finds_any_hidden_name_in_bytes_or_a_view(names: tuple[str, ...]) -> None:
    """One literal search when every hidden name has the reserved prefix, a scan of each name otherwise: the same
    answers either way, on bytes and on a memoryview of the receive buffer."""
    hidden = HiddenTopics(names)
    frames = [b"\x00\x0b__quotaflow_usage\x00", b"..__quotaflow", b"__quotaflo", b"orders", b""]
    if "store" in names:
        frames.append(b"\x00\x05store")
    for frame in frames:
        expected = any(n.encode() in frame for n in ("__quotaflow", *names))
        assert bool(hidden.may_name(frame)) is expected, frame
        assert bool(hidden.may_name(memoryview(bytearray(frame)))) is expected, frame

    class Spec:
        topic = "custom-store"

    class Store:
        spec = Spec()

    found = hidden_topics_for(Store(), {"quotaflow.quota.cluster.usage.topic": "usage-x"})
    assert {"custom-store", "usage-x", "__quotaflow_usage"} <= found.names


def test_without_an_authorizer_only_quotaflows_topics_are_refused_and_other_frames_are_not_decoded() -> None:
    access = _access(None)
    plan, _ = _plan(access, ApiKey.ListOffsets, 5, replica_id=-1, isolation_level=0, topics=[
        protocol.REQUESTS[ApiKey.ListOffsets].ListOffsetsTopic(name="orders", partitions=[])])
    assert plan is None  # no hidden name in the bytes: forwarded as they came
    plan, header = _plan(access, ApiKey.Produce, 9, transactional_id=None, acks=-1, timeout_ms=1000,
                         topic_data=[_produce_topic(STORE, (0, 1)), _produce_topic("orders")])
    assert plan is not None
    assert [t.name for t in _forwarded(plan, header).topic_data] == ["orders"]
    upstream = _response(ApiKey.Produce, 9, responses=[])
    assert plan.merge is not None
    plan.merge(upstream)
    refused = upstream.responses[0]
    assert refused.name == STORE and [(p.index, p.error_code, p.base_offset) for p in refused.partition_responses] \
        == [(0, 29, -1), (1, 29, -1)]


def test_admins_and_super_users_do_not_reach_quotaflows_topics() -> None:
    rows: list[dict[str, Any]] = []
    access = _access(MemoryAuthorizer(super_users=frozenset({"User:admin"})), rows)
    plan, header = _plan(access, ApiKey.Produce, 8, principal="admin", transactional_id=None, acks=1,
                         timeout_ms=1000, topic_data=[_produce_topic("__quotaflow_usage")])
    assert plan is not None
    response = _local(plan, header)
    assert [(t.name, [p.error_code for p in t.partition_responses]) for t in response.responses] == \
        [("__quotaflow_usage", [29])]
    assert rows and rows[0]["hidden_topic"] and rows[0]["principal"] == "User:admin" and not rows[0]["allowed"]
    assert rows[0]["client_ip"] == "10.0.0.9" and rows[0]["operation"] == "WRITE"


# -- Produce and Fetch, the hot path -----------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(3, topic_names.PRODUCE_MAX + 1))
def test_produce_topic_names_are_read_without_a_decode(version: int) -> None:
    header, frame = _frame(ApiKey.Produce, version, transactional_id="tx" if version >= 3 else None, acks=-1,
                           timeout_ms=10, topic_data=[_produce_topic("a", (0, 1, 2)), _produce_topic("bb")])
    assert topic_names.produce_topics(frame, header) == ("tx", ["a", "bb"])
    with pytest.raises(InvalidRequestError):
        topic_names.produce_topics(frame[:-3], header)


def _fetch_topic(name: str, partitions: tuple[int, ...] = (0,)) -> Any:
    cls = protocol.REQUESTS[ApiKey.Fetch]
    return cls.FetchTopic(topic=name, partitions=[cls.FetchTopic.FetchPartition(
        partition=p, current_leader_epoch=-1, fetch_offset=5, log_start_offset=-1, partition_max_bytes=1 << 20)
        for p in partitions])


def _fetch(version: int, *names: str, replica_id: int = -1, epoch: int = 0) -> dict[str, Any]:
    cls = protocol.REQUESTS[ApiKey.Fetch]
    return {"replica_id": replica_id, "max_wait_ms": 10, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": epoch, "rack_id": "r", "topics": [_fetch_topic(n, (0, 1)) for n in names],
            "forgotten_topics_data": [cls.ForgottenTopic(topic="gone", partitions=[3])]}


@pytest.mark.parametrize("version", range(4, topic_names.FETCH_MAX + 1))
def test_fetch_topic_names_are_read_without_a_decode(version: int) -> None:
    header, frame = _frame(ApiKey.Fetch, version, **_fetch(version, "a", "bb", "ccc"))
    assert topic_names.fetch_topics(frame, header) == ["a", "bb", "ccc"]
    with pytest.raises(InvalidRequestError):
        topic_names.fetch_topics(frame[:header.end + 40], header)
    sessionless = topic_names.sessionless_fetch(frame, header)
    decoded = protocol.decode_request(sessionless, header)
    if version >= 7:
        assert (decoded.session_id, decoded.session_epoch) == (0, -1)  # full fetch, no session (KIP-227)
    assert [t.topic for t in decoded.topics] == ["a", "bb", "ccc"]


def test_fetch_refuses_topics_per_partition_and_turns_sessions_off_with_an_authorizer() -> None:
    authorizer = MemoryAuthorizer([Acl("User:bob", Op.READ, Rt.TOPIC, "bob-", prefixed=True)])
    plan, header = _plan(_access(authorizer), ApiKey.Fetch, 11, **_fetch(11, "bob-1", "alice-1", STORE))
    assert plan is not None
    forwarded = _forwarded(plan, header)
    assert [t.topic for t in forwarded.topics] == ["bob-1"] and forwarded.session_epoch == -1
    upstream = _response(ApiKey.Fetch, 11, error_code=0, session_id=0, responses=[])
    assert plan.merge is not None
    plan.merge(upstream)
    assert [(t.topic, [(p.partition_index, p.error_code, p.high_watermark) for p in t.partitions])
            for t in upstream.responses] == [("alice-1", [(0, 29, -1), (1, 29, -1)]),
                                             (STORE, [(0, 29, -1), (1, 29, -1)])]
    # every topic allowed: the frame still goes sessionless; a follower's fetch needs CLUSTER_ACTION
    plan, header = _plan(_access(authorizer), ApiKey.Fetch, 11, **_fetch(11, "bob-1"))
    assert plan is not None and _forwarded(plan, header).session_epoch == -1 and plan.merge is None
    plan, header = _plan(_access(authorizer), ApiKey.Fetch, 11, **_fetch(11, "bob-1", replica_id=3))
    assert plan is not None
    assert {p.error_code for t in _local(plan, header).responses for p in t.partitions} == {31}


def test_transactional_produce_needs_write_on_its_transactional_id() -> None:
    authorizer = MemoryAuthorizer([BOB_WRITES_BOB])
    plan, header = _plan(_access(authorizer), ApiKey.Produce, 9, transactional_id="tx-1", acks=-1, timeout_ms=10,
                         topic_data=[_produce_topic("bob-1", (0, 1))])
    assert plan is not None
    assert {p.error_code for t in _local(plan, header).responses for p in t.partition_responses} == {53}
    authorizer.acls.append(Acl("User:bob", Op.WRITE, Rt.TRANSACTIONAL_ID, "tx-1"))
    plan, _ = _plan(_access(authorizer), ApiKey.Produce, 9, transactional_id="tx-1", acks=-1, timeout_ms=10,
                    topic_data=[_produce_topic("bob-1")])
    assert plan is None


def test_an_acks0_produce_refused_entirely_gets_no_response() -> None:
    plan, _ = _plan(_access(MemoryAuthorizer()), ApiKey.Produce, 7, transactional_id=None, acks=0, timeout_ms=10,
                    topic_data=[_produce_topic("orders")])
    assert plan is not None and plan.forward is None and plan.local == b""


# -- Metadata ------------------------------------------------------------------------------------------------

def _metadata_response(version: int, *names: str, error: int = 0) -> Any:
    cls = protocol.response_class(ApiKey.Metadata, version)
    return cls(brokers=[], cluster_id="c", controller_id=1, topics=[
        cls.MetadataResponseTopic(error_code=error, name=n, is_internal=False, partitions=[]) for n in names])


def test_metadata_lists_only_describable_topics_and_answers_named_ones_with_29() -> None:
    authorizer = MemoryAuthorizer([Acl("User:bob", Op.READ, Rt.TOPIC, "bob-", prefixed=True)])
    access = _access(authorizer)
    plan, header = _plan(access, ApiKey.Metadata, 9, topics=None, allow_auto_topic_creation=True,
                         include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    assert plan is not None and plan.merge is not None
    response = _metadata_response(9, "bob-1", "alice-1", STORE, "__quotaflow_usage")
    plan.merge(response)
    assert [t.name for t in response.topics] == ["bob-1"]  # READ implies DESCRIBE

    cls = protocol.REQUESTS[ApiKey.Metadata]
    plan, header = _plan(access, ApiKey.Metadata, 9, allow_auto_topic_creation=True,
                         include_cluster_authorized_operations=True, include_topic_authorized_operations=True,
                         topics=[cls.MetadataRequestTopic(name=n) for n in ("bob-1", "bob-new", "alice-1", STORE)])
    assert plan is not None and plan.merge is not None
    forwarded = _forwarded(plan, header)
    # bob may not create topics: auto-creation off, and an unknown topic comes back 29 as from KafkaApis
    assert [t.name for t in forwarded.topics] == ["bob-1", "bob-new"] and not forwarded.allow_auto_topic_creation
    response = _metadata_response(9, "bob-1", "unasked-topic")
    response.topics.append(_metadata_response(9, "bob-new", error=3).topics[0])
    plan.merge(response)
    assert [(t.name, t.error_code) for t in response.topics] == [("bob-1", 0), ("bob-new", 29), ("alice-1", 29),
                                                                 (STORE, 29)]
    assert response.topics[0].authorized_operations == {Op.READ, Op.DESCRIBE}  # READ implies DESCRIBE
    assert response.authorized_operations == set()
    encoded = protocol.encode_response(response, 9, 7)
    assert protocol.decode_response(encoded[4:], ApiKey.Metadata, 9).topics[0].authorized_operations == \
        {Op.READ, Op.DESCRIBE}


def test_metadata_auto_creation_stays_on_with_create_on_the_cluster_and_without_an_authorizer() -> None:
    authorizer = MemoryAuthorizer([Acl("User:bob", Op.ALL, Rt.TOPIC, "*"), Acl("User:bob", Op.CREATE, Rt.CLUSTER,
                                                                               "kafka-cluster")])
    cls = protocol.REQUESTS[ApiKey.Metadata]
    for access in (_access(authorizer), _access(None)):
        plan, header = _plan(access, ApiKey.Metadata, 9, allow_auto_topic_creation=True,
                             include_cluster_authorized_operations=False, include_topic_authorized_operations=False,
                             topics=[cls.MetadataRequestTopic(name="new")])
        assert plan is not None and plan.forward is not None
        assert protocol.decode_request(plan.forward, header).allow_auto_topic_creation


# -- groups, offsets, transactions -------------------------------------------------------------------------------

def test_offset_commit_needs_read_on_the_group_then_on_each_topic() -> None:
    cls = protocol.REQUESTS[ApiKey.OffsetCommit]
    partition = cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    topics = [cls.OffsetCommitRequestTopic(name=n, partitions=[partition(
        partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])
        for n in ("bob-1", "alice-1")]
    fields = {"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m", "group_instance_id": None,
              "topics": topics}
    authorizer = MemoryAuthorizer([Acl("User:bob", Op.READ, Rt.TOPIC, "bob-", prefixed=True)])
    plan, header = _plan(_access(authorizer), ApiKey.OffsetCommit, 8, **fields)
    assert plan is not None
    assert {p.error_code for t in _local(plan, header).topics for p in t.partitions} == {30}
    authorizer.acls.append(Acl("User:bob", Op.READ, Rt.GROUP, "g"))
    plan, header = _plan(_access(authorizer), ApiKey.OffsetCommit, 8, **fields)
    assert plan is not None and [t.name for t in _forwarded(plan, header).topics] == ["bob-1"]
    upstream = _response(ApiKey.OffsetCommit, 8, topics=[])
    assert plan.merge is not None
    plan.merge(upstream)
    assert [(t.name, [p.error_code for p in t.partitions]) for t in upstream.topics] == [("alice-1", [29])]


def test_add_partitions_to_txn_fails_whole_when_one_topic_is_refused() -> None:
    cls = protocol.REQUESTS[ApiKey.AddPartitionsToTxn]
    authorizer = MemoryAuthorizer([BOB_WRITES_BOB, Acl("User:bob", Op.WRITE, Rt.TRANSACTIONAL_ID, "tx")])
    plan, header = _plan(_access(authorizer), ApiKey.AddPartitionsToTxn, 3, v3_and_below_transactional_id="tx",
                         v3_and_below_producer_id=1, v3_and_below_producer_epoch=0, v3_and_below_topics=[
                             cls.AddPartitionsToTxnTopic(name="bob-1", partitions=[0, 1]),
                             cls.AddPartitionsToTxnTopic(name=STORE, partitions=[0])])
    assert plan is not None
    response = _local(plan, header)
    assert [(t.name, [p.partition_error_code for p in t.results_by_partition])
            for t in response.results_by_topic_v3_and_below] == [("bob-1", [55, 55]), (STORE, [29])]


def test_find_coordinator_refuses_keys_one_by_one() -> None:
    authorizer = MemoryAuthorizer([Acl("User:bob", Op.DESCRIBE, Rt.GROUP, "bob-", prefixed=True)])
    plan, header = _plan(_access(authorizer), ApiKey.FindCoordinator, 4, key_type=0,
                         coordinator_keys=["bob-g", "alice-g"])
    assert plan is not None and _forwarded(plan, header).coordinator_keys == ["bob-g"]
    upstream = _response(ApiKey.FindCoordinator, 4, coordinators=[])
    assert plan.merge is not None
    plan.merge(upstream)
    assert [(c.key, c.error_code, c.node_id) for c in upstream.coordinators] == [("alice-g", 30, -1)]
    plan, header = _plan(_access(authorizer), ApiKey.FindCoordinator, 3, key="tx", key_type=1)
    assert plan is not None and _local(plan, header).error_code == 53


def test_init_producer_id_without_a_transactional_id_falls_back_to_write_on_some_topic() -> None:
    fields = {"transactional_id": None, "transaction_timeout_ms": 1000, "producer_id": -1, "producer_epoch": -1}
    plan, header = _plan(_access(MemoryAuthorizer()), ApiKey.InitProducerId, 4, **fields)
    assert plan is not None and _local(plan, header).error_code == 31
    plan, _ = _plan(_access(MemoryAuthorizer([BOB_WRITES_BOB])), ApiKey.InitProducerId, 4, **fields)
    assert plan is None


# -- topics, configs, cluster ------------------------------------------------------------------------------------

def test_create_topics_needs_create_on_the_cluster_or_on_each_topic() -> None:
    cls = protocol.REQUESTS[ApiKey.CreateTopics]
    topics = [cls.CreatableTopic(name=n, num_partitions=1, replication_factor=1, assignments=[], configs=[])
              for n in ("bob-1", "alice-1", "__quotaflow_usage")]
    authorizer = MemoryAuthorizer([Acl("User:bob", Op.CREATE, Rt.TOPIC, "bob-", prefixed=True)])
    plan, header = _plan(_access(authorizer), ApiKey.CreateTopics, 5, topics=topics, timeout_ms=1000,
                         validate_only=False)
    assert plan is not None and [t.name for t in _forwarded(plan, header).topics] == ["bob-1"]
    upstream = _response(ApiKey.CreateTopics, 5, topics=[protocol.response_class(ApiKey.CreateTopics, 5)
                                                          .CreatableTopicResult(name="bob-1", error_code=0,
                                                                                num_partitions=1,
                                                                                replication_factor=1, configs=[])])
    assert plan.merge is not None
    plan.merge(upstream)
    assert [(t.name, t.error_code) for t in upstream.topics] == [("bob-1", 0), ("alice-1", 29),
                                                                 ("__quotaflow_usage", 29)]
    assert upstream.topics[0].topic_config_error_code == 29  # CREATE does not imply DESCRIBE_CONFIGS
    # CREATE on the cluster: every name but quotaflow's own
    authorizer.acls.append(Acl("User:bob", Op.CREATE, Rt.CLUSTER, "kafka-cluster"))
    plan, header = _plan(_access(authorizer), ApiKey.CreateTopics, 5, topics=topics, timeout_ms=1000,
                         validate_only=False)
    assert plan is not None and [t.name for t in _forwarded(plan, header).topics] == ["bob-1", "alice-1"]


def test_delete_topics_and_create_partitions_refuse_per_topic() -> None:
    access = _access(MemoryAuthorizer([Acl("User:bob", Op.ALL, Rt.TOPIC, "bob-", prefixed=True)]))
    plan, header = _plan(access, ApiKey.DeleteTopics, 4, topic_names=["bob-1", STORE, "alice-1"], timeout_ms=10)
    assert plan is not None and _forwarded(plan, header).topic_names == ["bob-1"]
    cls = protocol.REQUESTS[ApiKey.CreatePartitions]
    plan, header = _plan(access, ApiKey.CreatePartitions, 2, timeout_ms=10, validate_only=False,
                         topics=[cls.CreatePartitionsTopic(name=STORE, count=4, assignments=None)])
    assert plan is not None
    assert [(r.name, r.error_code) for r in _local(plan, header).results] == [(STORE, 29)]


def test_configs_are_authorized_per_resource_type() -> None:
    cls = protocol.REQUESTS[ApiKey.DescribeConfigs]
    resources = [cls.DescribeConfigsResource(resource_type=t, resource_name=n, configuration_keys=None)
                 for t, n in ((2, "bob-1"), (2, STORE), (4, "1"), (32, "g"))]
    authorizer = MemoryAuthorizer([Acl("User:bob", Op.ALTER_CONFIGS, Rt.TOPIC, "bob-", prefixed=True)])
    plan, header = _plan(_access(authorizer), ApiKey.DescribeConfigs, 2, resources=resources,
                         include_synonyms=False)
    assert plan is not None
    assert [r.resource_name for r in _forwarded(plan, header).resources] == ["bob-1"]  # ALTER_ implies DESCRIBE_
    upstream = _response(ApiKey.DescribeConfigs, 2, results=[])
    assert plan.merge is not None
    plan.merge(upstream)
    assert [(r.resource_type, r.resource_name, r.error_code) for r in upstream.results] == \
        [(2, STORE, 29), (4, "1", 31), (32, "g", 30)]


def test_cluster_apis_need_their_cluster_operation() -> None:
    access = _access(MemoryAuthorizer())
    plan, header = _plan(access, ApiKey.DescribeLogDirs, 1, topics=None)
    assert plan is not None and _local(plan, header).results == []
    plan, header = _plan(access, ApiKey.DescribeLogDirs, 3, topics=None)
    assert plan is not None and _local(plan, header).error_code == 31
    cls = protocol.REQUESTS[ApiKey.ElectLeaders]
    plan, header = _plan(access, ApiKey.ElectLeaders, 1, election_type=0, timeout_ms=10, topic_partitions=[
        cls.TopicPartitions(topic="t", partitions=[0, 1])])
    assert plan is not None
    refused = _local(plan, header)
    assert refused.error_code == 31 and [p.error_code for r in refused.replica_election_results
                                         for p in r.partition_result] == [31, 31]
    plan, _ = _plan(_access(MemoryAuthorizer(super_users=frozenset({"User:bob"}))), ApiKey.DescribeLogDirs, 3,
                    topics=None)
    assert plan is not None and plan.forward is not None  # allowed; the answer is filtered for hidden topics


def test_an_api_the_gateway_cannot_authorize_is_refused() -> None:
    header = protocol.RequestHeader(ApiKey.ConsumerGroupHeartbeat, 0, 1, "c", 0)
    with pytest.raises(PermissionError):
        authorize.plan(_access(None), Scope("bob"), header, b"", "10.0.0.9")  # type: ignore[arg-type]
    header = protocol.RequestHeader(40, 0, 1, "c", 0)  # RenewDelegationToken: no message definition, no rule
    with pytest.raises(PermissionError):
        authorize.plan(_access(None), Scope("bob"), header, b"", "h")  # type: ignore[arg-type]
    for key in (ApiKey.Fetch, ApiKey.Produce, ApiKey.DeleteTopics, ApiKey.OffsetCommit, ApiKey.OffsetFetch):
        _lo, hi = authorize.version_range(key, 0, 99)
        assert hi <= {ApiKey.Fetch: 12, ApiKey.Produce: 9, ApiKey.DeleteTopics: 5}.get(key, 9)  # names, not ids


# -- every API, every offered version: quotaflow's topics never forwarded ------------------------------------------

_TOPIC_FIELDS = frozenset({"name", "topic", "topic_names", "resource_name"})
_TOPIC_APIS = frozenset({ApiKey.Produce, ApiKey.Fetch, ApiKey.ListOffsets, ApiKey.Metadata, ApiKey.OffsetCommit,
                         ApiKey.OffsetFetch, ApiKey.CreateTopics, ApiKey.DeleteTopics, ApiKey.DeleteRecords,
                         ApiKey.OffsetForLeaderEpoch, ApiKey.AddPartitionsToTxn, ApiKey.TxnOffsetCommit,
                         ApiKey.DescribeConfigs, ApiKey.AlterConfigs, ApiKey.IncrementalAlterConfigs,
                         ApiKey.CreatePartitions, ApiKey.ElectLeaders, ApiKey.AlterPartitionReassignments,
                         ApiKey.ListPartitionReassignments, ApiKey.OffsetDelete, ApiKey.DescribeProducers,
                         ApiKey.DescribeTopicPartitions})


def _filled(cls: Any, version: int, depth: int = 0, topic: str = STORE) -> dict[str, Any]:
    """Every field of ``cls`` at ``version``: topic positions hold ``topic`` (a hidden name by default), other
    strings "g", one element per array (to depth 4)."""
    values: dict[str, Any] = {}
    for name, field in cls._struct.fields.items():
        if not field.for_version_q(version):
            continue
        kind, wire = type(field).__name__, getattr(field, "type_str", "")
        is_topic = name in _TOPIC_FIELDS
        if kind == "StructArrayField":
            values[name] = [field.data_class(**_filled(field.data_class, version, depth + 1, topic))] \
                if depth < 4 else []
        elif kind == "StructField":
            values[name] = field.data_class(**_filled(field.data_class, version, depth + 1, topic))
        elif wire == "[]string":
            values[name] = [topic if is_topic else "g"]
        elif wire.startswith("[]int"):
            values[name] = [0]
        elif wire == "string":
            values[name] = topic if is_topic else "g"
        elif wire in ("int8", "int16", "int32", "int64"):
            values[name] = {"replica_id": -1, "resource_type": 2}.get(name, 0)
        elif wire == "bool":
            values[name] = False
        elif wire in ("bytes", "records"):
            values[name] = b"x"
    return values


def _topic_values(message: Any) -> list[Any]:
    found = []
    for name in message._struct.fields:
        value = getattr(message, name, None)
        if name in _TOPIC_FIELDS:
            found.extend(value if isinstance(value, list) else [value])
        for item in value if isinstance(value, list) else [value]:
            if hasattr(item, "_struct"):
                found.extend(_topic_values(item))
    return found


@pytest.mark.parametrize("authorizer", [None, MemoryAuthorizer(super_users=frozenset({"User:bob"}))],
                         ids=["no-authorizer", "super-user"])
def test_no_offered_version_of_any_api_forwards_quotaflows_topics(authorizer: MemoryAuthorizer | None) -> None:
    checked = 0
    for key in sorted(_TOPIC_APIS):
        cls = protocol.REQUESTS[key]
        lo, hi = authorize.version_range(key, int(cls.min_version), 99)
        for version in range(lo, hi + 1):
            plan, header = _plan(_access(authorizer), key, version, **_filled(cls[version], version))
            assert plan is not None, (protocol.api_name(key), version)
            if plan.forward is not None:
                assert STORE not in _topic_values(_forwarded(plan, header)), (protocol.api_name(key), version)
            if plan.local:
                _local(plan, header)  # a well-formed answer
            if plan.merge is not None:
                response = protocol.response_class(key, version)()
                plan.merge(response)
                protocol.encode_response(response, version, 7)
            checked += 1
    assert checked > 100


def test_decisions_are_counted_for_metrics() -> None:
    from quotaflow.gateway.observation.metrics_http import MetricsServer

    access = _access(MemoryAuthorizer([BOB_WRITES_BOB]))
    for topic in ("bob-1", "alice-1", STORE):
        _plan(access, ApiKey.Produce, 9, transactional_id=None, acks=1, timeout_ms=10,
              topic_data=[_produce_topic(topic)])
    status, _ctype, body = MetricsServer(sources=[access.audit]).render("GET", "/metrics")
    text = body.decode()
    assert status == 200
    assert 'kafka_server_authorizer_metrics_authorization_allowed_total{api="Produce",operation="WRITE",' \
           'resource_type="TOPIC"} 1.0' in text
    assert 'kafka_server_authorizer_metrics_authorization_denied_total{api="Produce",operation="WRITE",' \
           'resource_type="TOPIC"} 1.0' in text
    assert 'kafka_server_authorizer_metrics_hidden_topic_refusals_total{api="Produce"} 1.0' in text


def test_decisions_are_cached_until_the_acls_change() -> None:
    class Versioned(MemoryAuthorizer):
        generation: int | None = 1

    authorizer = Versioned([BOB_WRITES_BOB])
    access = _access(authorizer)
    produce = {"transactional_id": None, "acks": 1, "timeout_ms": 10, "topic_data": [_produce_topic("bob-1")]}
    for _ in range(3):
        assert _plan(access, ApiKey.Produce, 9, **produce)[0] is None
    assert authorizer.calls == 1
    authorizer.acls.clear()
    authorizer.generation = 2  # what StandardAuthorizer.load does (Authorizer.generation)
    assert _plan(access, ApiKey.Produce, 9, **produce)[0] is not None and authorizer.calls == 2
    plain = MemoryAuthorizer([BOB_WRITES_BOB])  # generation None: asked every time
    access = _access(plain)
    for _ in range(2):
        _plan(access, ApiKey.Produce, 9, **produce)
    assert plain.calls == 2


@pytest.mark.parametrize("version", [10, 11, 12])
def test_a_topic_named_by_id_in_metadata_is_refused(version: int) -> None:
    import uuid

    cls = protocol.REQUESTS[ApiKey.Metadata]
    topic_id = uuid.uuid4()
    plan, header = _plan(_access(None), ApiKey.Metadata, version, allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False,
                         topics=[cls.MetadataRequestTopic(name=None, topic_id=topic_id)])
    assert plan is not None and plan.merge is not None and not _forwarded(plan, header).topics
    response = _metadata_response(version)
    plan.merge(response)
    decoded = protocol.decode_response(protocol.encode_response(response, version, 7)[4:], ApiKey.Metadata,
                                       version)
    assert [(t.topic_id, t.error_code) for t in decoded.topics] == [(topic_id, 29)]


# -- per-API required operations (facts of Kafka's AuthorizerIntegrationTest): a principal without ACLs ---------

def _errors(message: Any) -> set[int]:
    """Every error code in a response, at any depth."""
    found = set()
    for name in message._struct.fields:
        value = getattr(message, name, None)
        if name in ("error_code", "partition_error_code") and isinstance(value, int):
            found.add(value)
        for item in value if isinstance(value, list) else [value]:
            if hasattr(item, "_struct"):
                found |= _errors(item)
    return found


@pytest.mark.parametrize(("api", "version", "code"), [
    (ApiKey.ListOffsets, 5, 29), (ApiKey.DeleteRecords, 1, 29), (ApiKey.DescribeProducers, 0, 29),
    (ApiKey.AlterConfigs, 1, 29), (ApiKey.IncrementalAlterConfigs, 1, 29), (ApiKey.OffsetDelete, 0, 30),
    (ApiKey.JoinGroup, 5, 30), (ApiKey.SyncGroup, 3, 30), (ApiKey.Heartbeat, 3, 30), (ApiKey.LeaveGroup, 3, 30),
    (ApiKey.DescribeGroups, 3, 30), (ApiKey.DeleteGroups, 1, 30), (ApiKey.OffsetFetch, 5, 30),
    (ApiKey.EndTxn, 2, 53), (ApiKey.AddOffsetsToTxn, 2, 53), (ApiKey.TxnOffsetCommit, 2, 53),
    (ApiKey.DescribeTransactions, 0, 53), (ApiKey.UpdateFeatures, 1, 31), (ApiKey.AlterPartitionReassignments, 0, 31),
    (ApiKey.DescribeQuorum, 0, 31), (ApiKey.ListConfigResources, 0, 31), (ApiKey.ElectLeaders, 1, 31),
])
def test_each_api_answers_its_kafka_error_to_a_principal_without_acls(api: int, version: int, code: int) -> None:
    cls = protocol.REQUESTS[api]
    fields = _filled(cls[version], version, topic="orders")
    plan, header = _plan(_access(MemoryAuthorizer()), api, version, **fields)
    assert plan is not None and plan.forward is None, protocol.api_name(api)
    assert _errors(_local(plan, header)) == {code}, protocol.api_name(api)
    # a super user's request goes upstream untouched
    plan, _ = _plan(_access(MemoryAuthorizer(super_users=frozenset({"User:bob"}))), api, version, **fields)
    assert plan is None or plan.forward is not None


def test_listings_keep_only_what_the_principal_may_describe() -> None:
    authorizer = MemoryAuthorizer([Acl("User:bob", Op.DESCRIBE, Rt.GROUP, "bob-", prefixed=True),
                                   Acl("User:bob", Op.DESCRIBE, Rt.TRANSACTIONAL_ID, "bob-", prefixed=True)])
    plan, _ = _plan(_access(authorizer), ApiKey.ListGroups, 3)
    assert plan is not None and plan.merge is not None
    groups = protocol.response_class(ApiKey.ListGroups, 3)
    response = groups(error_code=0, groups=[groups.ListedGroup(group_id=g, protocol_type="consumer")
                                            for g in ("bob-1", "alice-1")])
    plan.merge(response)
    assert [g.group_id for g in response.groups] == ["bob-1"]
    plan, _ = _plan(_access(authorizer), ApiKey.ListTransactions, 0, state_filters=[], producer_id_filters=[])
    assert plan is not None and plan.merge is not None
    txns = protocol.response_class(ApiKey.ListTransactions, 0)
    response = txns(error_code=0, unknown_state_filters=[], transaction_states=[
        txns.TransactionState(transactional_id=t, producer_id=1, transaction_state="Ongoing")
        for t in ("bob-tx", "alice-tx")])
    plan.merge(response)
    assert [t.transactional_id for t in response.transaction_states] == ["bob-tx"]
    # with DESCRIBE on the cluster, ListGroups is the upstream's as it is
    authorizer.acls.append(Acl("User:bob", Op.DESCRIBE, Rt.CLUSTER, "kafka-cluster"))
    assert _plan(_access(authorizer), ApiKey.ListGroups, 3)[0] is None


@pytest.mark.parametrize("version", range(4, topic_names.FETCH_MAX + 1))
def test_a_refused_fetch_partition_is_kafkas_partition_response(version: int) -> None:
    """FetchResponse.partitionResponse: the error and high_watermark -1, the schema's defaults for the rest, and
    empty records (issue 34: null records made librdkafka fail to parse the response and re-send it at once)."""
    plan, header = _plan(_access(MemoryAuthorizer()), ApiKey.Fetch, version, **_fetch(version, "alice-1"))
    assert plan is not None
    answer = _local(plan, header)
    [topic] = answer.responses
    fields = [(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset,
               p.aborted_transactions, p.preferred_read_replica, p.records) for p in topic.partitions]
    assert fields == [(p, 29, -1, -1, -1, [], -1, b"") for p in (0, 1)]  # b"": empty, not null (None)


@pytest.mark.parametrize(("api", "version", "expected"), [
    (ApiKey.JoinGroup, 6, {"generation_id": -1, "member_id": "", "leader": "", "protocol_name": "", "members": []}),
    (ApiKey.JoinGroup, 7, {"generation_id": -1, "protocol_type": None, "protocol_name": None}),
    (ApiKey.SyncGroup, 5, {"protocol_type": None, "protocol_name": None, "assignment": b""}),
])
def test_group_refusals_are_their_requests_error_responses(api: int, version: int, expected: dict[str, Any]) -> None:
    """JoinGroupRequest / SyncGroupRequest.getErrorResponse: the protocol name null from JoinGroup v7, and null
    protocol type and name in SyncGroup (it was given JoinGroup's empty name)."""
    fields: dict[str, Any] = {"group_id": "g", "member_id": "", "generation_id": -1, "protocol_type": "consumer",
                              "protocols": [], "assignments": [], "session_timeout_ms": 6000,
                              "rebalance_timeout_ms": 6000, "group_instance_id": None, "protocol_name": "range",
                              "reason": None}
    cls = protocol.REQUESTS[api][version]
    plan, header = _plan(_access(MemoryAuthorizer()), api, version,
                         **{k: v for k, v in fields.items() if k in cls._struct.fields})
    assert plan is not None
    answer = _local(plan, header)
    assert answer.error_code == 30
    assert {k: getattr(answer, k) for k in expected} == expected


# -- issue 34: fields the rule table covers by refusing -------------------------------------------------------------

def _epochs(replica_id: int, *names: str) -> dict[str, Any]:
    cls = protocol.REQUESTS[ApiKey.OffsetForLeaderEpoch]
    topic = cls.OffsetForLeaderTopic
    return {"replica_id": replica_id, "topics": [topic(topic=n, partitions=[topic.OffsetForLeaderPartition(
        partition=0, current_leader_epoch=-1, leader_epoch=1)]) for n in names]}


def test_a_followers_offset_for_leader_epoch_needs_cluster_action() -> None:
    authorizer = MemoryAuthorizer([Acl("User:bob", Op.DESCRIBE, Rt.TOPIC, "bob-", prefixed=True)])
    plan, header = _plan(_access(authorizer), ApiKey.OffsetForLeaderEpoch, 4, **_epochs(1, "bob-1"))
    assert plan is not None
    assert [(t.topic, [p.error_code for p in t.partitions]) for t in _local(plan, header).topics] == \
        [("bob-1", [31])]
    plan, _ = _plan(_access(authorizer), ApiKey.OffsetForLeaderEpoch, 4, **_epochs(-1, "bob-1"))
    assert plan is None  # a consumer's: DESCRIBE on the topic, allowed
    authorizer.acls.append(Acl("User:bob", Op.CLUSTER_ACTION, Rt.CLUSTER, "kafka-cluster"))
    plan, _ = _plan(_access(authorizer), ApiKey.OffsetForLeaderEpoch, 4, **_epochs(1, "bob-1"))
    assert plan is None


@pytest.mark.parametrize("authorized", [False, True])
def test_a_metadata_entry_with_a_topic_id_is_refused_whatever_its_name(authorized: bool) -> None:
    import uuid

    authorizer = MemoryAuthorizer([Acl("User:bob", Op.DESCRIBE, Rt.TOPIC, "bob-", prefixed=True)]) \
        if authorized else None
    cls = protocol.REQUESTS[ApiKey.Metadata]
    topic = cls.MetadataRequestTopic
    plan, header = _plan(_access(authorizer), ApiKey.Metadata, 12, allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False,
                         topics=[topic(name="bob-1", topic_id=uuid.uuid4()), topic(name="bob-2", topic_id=None)])
    assert plan is not None and plan.forward is not None
    forwarded = _forwarded(plan, header)
    assert [(t.name, t.topic_id) for t in forwarded.topics] == [("bob-2", None)]  # no id reaches the upstream
    upstream = _response(ApiKey.Metadata, 12, brokers=[], cluster_id=None, controller_id=-1, topics=[])
    assert plan.merge is not None
    plan.merge(upstream)
    assert [t.error_code for t in upstream.topics] == [29]
