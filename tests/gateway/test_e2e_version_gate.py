"""Issue 34's attacks on the version gate, over the raw wire through a gateway in front of tansu, with a recording
relay between the gateway and tansu (what reached the upstream): requests of versions the gateway does not
advertise, which its per-version readers never looked at.

* DeleteTopics v6 (the gateway advertises 0-5) by name deleted ``__quotaflow_usage`` (its planner read the v0-5
  field, found it empty and forwarded), and by topic id any topic;
* Fetch v13 / v16 by topic id returned quotaflow's own topics' records (a request by id has no name to look for);
* Produce v13 by topic id was forwarded as well.

Every one is refused as Kafka refuses a version it does not support (the connection closed) without a byte reaching
the upstream, with and without an authorizer; the topic is still there and holds what it held.

Each test runs in four modes (the ``stack`` fixture): PLAINTEXT without an authorizer and SASL/PLAIN with Kafka's
authorizer, both in front of tansu; and SASL passthrough on SASL_PLAINTEXT and on SASL_SSL (``passthrough_stack``),
in front of an upstream that authenticates and authorizes, where the gateway must still keep quotaflow's topics and
what it does not advertise from the cluster. In passthrough the generated test found the ACL APIs forwarded with
quotaflow's topic named in their patterns and filters (now refused, 31).
"""

from __future__ import annotations

import ssl
import struct
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import pytest
from kafka.protocol.admin import (
    CreateAclsRequest,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
)
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from kafka.record.memory_records import MemoryRecordsBuilder

from quotaflow.gateway.data import versions
from quotaflow.gateway.server import GatewayThread
from quotaflow.gateway.wire import protocol
from quotaflow.testing.tansu import Tansu

from .authz_gateway import start_authorizing_gateway
from .gateway_wire import Wire
from .passthrough_stack import passthrough_stack
from .recording_upstream import RecordingUpstream

pytestmark = pytest.mark.broker

USAGE = "__quotaflow_usage"


def _direct(tansu: Tansu) -> Wire:
    host, port = tansu.bootstrap.rsplit(":", 1)
    return Wire((host, int(port)))


def _ensure_topic(tansu: Tansu, name: str) -> uuid.UUID:
    """``name`` created on tansu directly (already there is fine), one record in it; its topic id."""
    wire = _direct(tansu)
    t = CreateTopicsRequest.CreatableTopic
    wire.send(CreateTopicsRequest[6](topics=[t(name=name, num_partitions=1, replication_factor=1, assignments=[],
                                               configs=[])], timeout_ms=10_000, validate_only=False), 6)
    assert CreateTopicsResponse.decode(wire.recv(), version=6, header=True).topics[0].error_code in (0, 36)
    wire.send(ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        ProduceRequest.TopicProduceData(name=name, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=_records())])]), 9)
    wire.recv()
    topic_id = _topic_id(tansu, name)
    assert topic_id is not None
    return topic_id


def _records() -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16)
    builder.append(timestamp=None, key=b"k", value=b"secret")
    builder.close()
    return bytes(builder.buffer())


def _topic_id(tansu: Tansu, name: str) -> uuid.UUID | None:
    wire = _direct(tansu)
    wire.send(MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name=name, topic_id=None)],
                                  allow_auto_topic_creation=False, include_topic_authorized_operations=False), 12)
    answer = MetadataResponse.decode(wire.recv(), version=12, header=True)
    found = [t for t in answer.topics if t.name == name and t.error_code == 0]
    return found[0].topic_id if found else None


def _end_offset(tansu: Tansu, name: str) -> int:
    wire = _direct(tansu)
    lo = ListOffsetsRequest
    wire.send(lo[5](replica_id=-1, isolation_level=0, topics=[lo.ListOffsetsTopic(name=name, partitions=[
        lo.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])]), 5)
    answer = ListOffsetsResponse.decode(wire.recv(), version=5, header=True)
    return int(answer.topics[0].partitions[0].offset)


@dataclass(frozen=True, slots=True)
class Stack:
    """A gateway, the relay between it and the upstream (what reached the upstream), the user a test connects as
    (None: PLAINTEXT, no SASL), and the gateway's mode."""

    gw: GatewayThread
    relay: RecordingUpstream
    user: str | None
    passthrough: bool = False
    tls: ssl.SSLContext | None = None
    listener: str | None = None

    @property
    def mode(self) -> dict[str, bool]:
        """``versions.offered``'s mode (in SASL passthrough the gateway has no authorizer: the cluster's decides)."""
        return {"sasl_passthrough": self.passthrough, "authorizer": self.user is not None and not self.passthrough}


@pytest.fixture(scope="module")
def tansu_relay(tansu: Tansu) -> Iterator[RecordingUpstream]:
    with RecordingUpstream(tansu.bootstrap) as upstream:
        yield upstream


@pytest.fixture(scope="module", params=["no-authorizer", "authorizer", "passthrough", "passthrough-tls"])
def stack(request: pytest.FixtureRequest, tansu: Tansu, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A gateway in front of a recording relay: PLAINTEXT without an authorizer; Kafka's authorizer with SASL/PLAIN
    (users admin, the super user, and bob, with no ACL), both in front of tansu; or SASL passthrough (on
    SASL_PLAINTEXT, or SASL_SSL) in front of an authenticating, authorizing upstream with the same users
    (``passthrough_stack``), where bob authenticates with the cluster through the gateway."""
    workdir = tmp_path_factory.mktemp(request.param)
    if request.param.startswith("passthrough"):
        with passthrough_stack(tansu.bootstrap, workdir, tls=request.param.endswith("tls")) as pt:
            yield Stack(pt.front, pt.relay, "bob", passthrough=True, tls=pt.tls_context(), listener=pt.listener)
        return
    relay: RecordingUpstream = request.getfixturevalue("tansu_relay")
    if request.param == "authorizer":
        gw = start_authorizing_gateway(relay.bootstrap, workdir)
        user: str | None = "bob"
    else:
        gw = GatewayThread(relay.bootstrap, {"PLAINTEXT": "127.0.0.1:0"}, workdir / "q.db").start()
        user = None
    try:
        yield Stack(gw, relay, user)
    finally:
        gw.stop()


def _open(stack: Stack) -> Wire:
    """A raw connection to the gateway, authenticated as the stack's user with SASL/PLAIN (None: PLAINTEXT); in
    passthrough the cluster checks the password, through the gateway."""
    wire = Wire(stack.gw.address(stack.listener), tls=stack.tls)
    if stack.user is not None:
        user = stack.user
        wire.send(SaslHandshakeRequest[1](mechanism="PLAIN"), 1)
        assert SaslHandshakeResponse.decode(wire.recv(), version=1, header=True).error_code == 0
        wire.send(SaslAuthenticateRequest[1](auth_bytes=f"\0{user}\0{user}-secret".encode()), 1)
        assert SaslAuthenticateResponse.decode(wire.recv(), version=1, header=True).error_code == 0
    return wire


@contextmanager
def _connected(stack: Stack) -> Iterator[Wire]:
    wire = _open(stack)
    try:
        yield wire
    finally:
        wire.sock.close()


def _advertised(wire: Wire) -> dict[int, tuple[int, int]]:
    wire.send(ApiVersionsRequest[3](client_software_name="gate-test", client_software_version="1"), 3)
    answer = ApiVersionsResponse.decode(wire.recv(), version=3, header=True)
    return {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}


def _refused_unseen(stack: Stack, request: Any, version: int) -> None:
    """``request`` at ``version`` closes the connection and never reaches the upstream (while an ordinary request
    on the same connection first does: the relay does see this gateway's requests)."""
    relay = stack.relay
    with _connected(stack) as wire:
        advertised = _advertised(wire)
        key = int(request.API_KEY)
        assert key not in advertised or version > advertised[key][1]  # an attack on a version not advertised
        mark = relay.mark()
        wire.send(MetadataRequest[4](topics=[], allow_auto_topic_creation=False), 4)
        MetadataResponse.decode(wire.recv(), version=4, header=True)
        assert [(s.api_key, s.version) for s in relay.since(mark)] == [(3, 4)]
        mark = relay.mark()
        wire.send(request, version)
        assert wire.closed(10.0)
        assert [(s.api_key, s.version) for s in relay.since(mark) if s.api_key == key] == []


def test_delete_topics_v6_by_name_or_id_never_reaches_the_upstream(stack: Stack, tansu: Tansu) -> None:
    usage_id = _ensure_topic(tansu, USAGE)
    ordinary = f"gate-{uuid.uuid4().hex[:8]}"
    ordinary_id = _ensure_topic(tansu, ordinary)
    state = DeleteTopicsRequest[6].DeleteTopicState
    for topic in (state(name=USAGE, topic_id=uuid.UUID(int=0)), state(name=None, topic_id=usage_id),
                  state(name=None, topic_id=ordinary_id)):
        _refused_unseen(stack, DeleteTopicsRequest[6](topics=[topic], timeout_ms=5000), 6)
    assert _topic_id(tansu, USAGE) == usage_id and _topic_id(tansu, ordinary) == ordinary_id


@pytest.mark.parametrize("version", [13, 16])
def test_fetch_by_topic_id_never_reaches_the_upstream(stack: Stack, tansu: Tansu, version: int) -> None:
    usage_id = _ensure_topic(tansu, USAGE)
    partition = FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                       last_fetched_epoch=-1, log_start_offset=-1,
                                                       partition_max_bytes=1 << 20)
    request = FetchRequest[version](replica_id=-1, max_wait_ms=10, min_bytes=0, max_bytes=1 << 20,
                                    isolation_level=0, session_id=0, session_epoch=-1,
                                    topics=[FetchRequest.FetchTopic(topic_id=usage_id, partitions=[partition])],
                                    forgotten_topics_data=[], rack_id="")
    _refused_unseen(stack, request, version)


def test_produce_v13_by_topic_id_never_reaches_the_upstream(stack: Stack, tansu: Tansu) -> None:
    usage_id = _ensure_topic(tansu, USAGE)
    before = _end_offset(tansu, USAGE)
    data = ProduceRequest.TopicProduceData
    request = ProduceRequest[13](transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        data(topic_id=usage_id, partition_data=[data.PartitionProduceData(index=0, records=_records())])])
    _refused_unseen(stack, request, 13)
    assert _end_offset(tansu, USAGE) == before


def test_metadata_v12_by_topic_id_never_names_it_upstream(stack: Stack, tansu: Tansu) -> None:
    """Metadata v12 (advertised) with quotaflow's topic id, alone or beside another topic's name (which a broker
    might resolve by id): that entry is refused (29) at the gateway and its id never reaches the upstream, while
    an ordinary topic in the same request is still forwarded (unless the gateway's own authorizer refuses it)."""
    usage_id = _ensure_topic(tansu, USAGE)
    ordinary = f"gate-md-{uuid.uuid4().hex[:8]}"
    _ensure_topic(tansu, ordinary)
    entry = MetadataRequest.MetadataRequestTopic
    relay = stack.relay
    with _connected(stack) as wire:
        assert _advertised(wire)[int(ApiKey.Metadata)][1] >= 12
        for topics in ([entry(name=None, topic_id=usage_id)],
                       [entry(name=ordinary, topic_id=usage_id), entry(name=ordinary, topic_id=None)]):
            mark = relay.mark()
            wire.send(MetadataRequest[12](topics=topics, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False), 12)
            answer = MetadataResponse.decode(wire.recv(), version=12, header=True)
            by_id = [t for t in answer.topics if t.topic_id == usage_id or t.name == USAGE]
            assert all(t.error_code == 29 for t in by_id), answer.topics
            assert not [t for t in answer.topics if t.name == USAGE], answer.topics
            seen = relay.since(mark)
            assert not [s for s in seen if usage_id.bytes in s.frame or USAGE.encode() in s.frame]
            if len(topics) > 1:  # bob has no ACL on it: refused by the gateway's authorizer, or by the cluster's
                assert [t.error_code for t in answer.topics if t.name == ordinary] == [29 if stack.user else 0]
                assert bool([s for s in seen if ordinary.encode() in s.frame]) != stack.mode["authorizer"]


def _raw_request(api_key: int, version: int, body: bytes = b"") -> bytes:
    """A request frame in header v1 (client id "wire"), for an API kafka-python cannot encode."""
    frame = struct.pack(">hhih", api_key, version, 7, 4) + b"wire" + body
    return struct.pack(">i", len(frame)) + frame


@pytest.mark.parametrize(("api_key", "version"), [
    (int(ApiKey.ConsumerGroupHeartbeat), 0),  # KIP-848: topic names and ids the gateway does not read
    (int(ApiKey.CreateDelegationToken), 3),  # the token would be the gateway's own
    (int(ApiKey.LeaderAndIsr), 7),  # inter-broker
    (1000, 0),  # no such API
])
def test_an_api_not_offered_closes_the_connection_unseen(stack: Stack, api_key: int, version: int) -> None:
    """A request for an API the gateway does not advertise, its body naming quotaflow's topic: the connection is
    closed and the upstream sees nothing of it, in every mode."""
    relay = stack.relay
    with _connected(stack) as wire:
        assert api_key not in _advertised(wire)
        mark = relay.mark()
        wire.sock.sendall(_raw_request(api_key, version, b"\x00\x11" + USAGE.encode()))
        assert wire.closed(10.0)
    assert not [s for s in relay.since(mark) if s.api_key == api_key or USAGE.encode() in s.frame]


@pytest.mark.parametrize("version", [4, 12])
def test_before_authentication_nothing_naming_quotaflows_topic_reaches_the_upstream(
        stack: Stack, tansu: Tansu, version: int) -> None:
    """On a SASL listener, a request other than SASL or ApiVersions before the client has authenticated (in
    passthrough: before the cluster accepted it) closes the connection, as Kafka's SaslServerAuthenticator does;
    it never reaches the upstream, by name or (v12) by id."""
    if stack.user is None:
        pytest.skip("a PLAINTEXT listener has no authentication to come before")
    usage_id = _ensure_topic(tansu, USAGE)
    relay = stack.relay
    mark = relay.mark()
    wire = Wire(stack.gw.address(stack.listener), tls=stack.tls)
    try:
        wire.send(SaslHandshakeRequest[1](mechanism="PLAIN"), 1)
        assert SaslHandshakeResponse.decode(wire.recv(), version=1, header=True).error_code == 0
        entry = MetadataRequest.MetadataRequestTopic
        topics = [entry(name=USAGE, topic_id=None)] if version < 10 else [entry(name=None, topic_id=usage_id)]
        wire.send(MetadataRequest[version](topics=topics, allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False), version)
        assert wire.closed(10.0)
    finally:
        wire.sock.close()
    assert not [s for s in relay.since(mark)
                if s.api_key == int(ApiKey.Metadata) or USAGE.encode() in s.frame or usage_id.bytes in s.frame]


def _acl_requests(name: str) -> list[tuple[Any, int]]:
    """DescribeAcls, CreateAcls and DeleteAcls v3 whose topic pattern or filter is ``name``."""
    create, delete = CreateAclsRequest.AclCreation, DeleteAclsRequest.DeleteAclsFilter
    return [
        (DescribeAclsRequest[3](resource_type_filter=2, resource_name_filter=name, pattern_type_filter=3,
                                principal_filter=None, host_filter=None, operation=1, permission_type=1), 3),
        (CreateAclsRequest[3](creations=[
            create(resource_type=2, resource_name="gate-other", resource_pattern_type=3, principal="User:bob",
                   host="*", operation=3, permission_type=3),
            create(resource_type=2, resource_name=name, resource_pattern_type=3, principal="User:bob", host="*",
                   operation=3, permission_type=3)]), 3),
        (DeleteAclsRequest[3](filters=[delete(resource_type_filter=2, resource_name_filter=name,
                                              pattern_type_filter=1, principal_filter=None, host_filter=None,
                                              operation=1, permission_type=1)]), 3),
    ]


def _acl_codes(answer: Any) -> list[int]:
    if hasattr(answer, "results"):
        return [r.error_code for r in answer.results]
    if hasattr(answer, "filter_results"):
        return [r.error_code for r in answer.filter_results]
    return [answer.error_code]


def test_acl_requests_naming_quotaflows_topics_never_reach_the_upstream(stack: Stack) -> None:
    """The ACL APIs are the cluster's in SASL passthrough (forwarded; the gateway answers them from its store
    otherwise): a tenant granting itself READ on ``__quotaflow_usage``, listing or deleting the ACLs that guard it,
    must not reach the cluster either. Refused whole with CLUSTER_AUTHORIZATION_FAILED at the gateway (Kafka's
    answer to an ACL request it does not allow); the same requests for an ordinary topic are the cluster's."""
    relay = stack.relay
    with _connected(stack) as wire:
        for request, version in _acl_requests(USAGE):
            mark = relay.mark()
            wire.send(request, version)
            answer = protocol.RESPONSES[int(request.API_KEY)].decode(wire.recv(), version=version, header=True)
            assert answer.header.correlation_id == wire.cid
            assert not [s for s in relay.since(mark) if USAGE.encode() in s.frame], protocol.api_name(request.API_KEY)
            if stack.passthrough:
                assert set(_acl_codes(answer)) == {31}, answer
        if stack.passthrough:
            for request, version in _acl_requests("gate-acl-ordinary"):
                mark = relay.mark()
                wire.send(request, version)
                protocol.RESPONSES[int(request.API_KEY)].decode(wire.recv(), version=version, header=True)
                assert [s.api_key for s in relay.since(mark)] == [int(request.API_KEY)]  # the cluster's to decide


# -- issue 34, item 7: the whole table, generated -------------------------------------------------------------------

NOACL = "gate-noacl-topic"  # exists upstream; bob has no ACL on it (nor on anything else)
NOACL_GROUP = "gate-noacl-group"
NOACL_TXN = "gate-noacl-txn"
_NOT_GENERATED = frozenset({ApiKey.SaslHandshake, ApiKey.ApiVersions, ApiKey.SaslAuthenticate})
"""The authentication exchange and ApiVersions (its versions above the gateway's get KIP-511's answer, tested in
tests/gateway/data/test_versions.py and the KIP-511 tests) are not generated."""
_INTS: Final = {"ReplicaId": -1, "Acks": -1, "TimeoutMs": 1000, "MaxWaitMs": 10, "MinBytes": 0, "SessionEpoch": -1,
                "MaxBytes": 1 << 20, "PartitionMaxBytes": 1 << 20, "ProducerId": -1, "ProducerEpoch": -1,
                "CurrentLeaderEpoch": -1, "LeaderEpoch": -1, "LastFetchedEpoch": -1, "LogStartOffset": -1,
                "Timestamp": -1, "GenerationId": -1, "GenerationIdOrMemberEpoch": -1, "ResourceType": 2,
                "KeyType": 0, "NumPartitions": 1, "ReplicationFactor": 1, "Count": 2, "Offset": 0,
                "CommittedOffset": 0, "CommittedLeaderEpoch": -1, "SessionTimeoutMs": 6000,
                "RebalanceTimeoutMs": 6000, "TransactionTimeoutMs": 6000, "Iterations": 4096, "Mechanism": 1,
                "ResourceTypeFilter": 2, "PatternTypeFilter": 3, "PatternType": 3, "Operation": 2,
                "PermissionType": 3, "ResourcePatternType": 3, "ElectionType": 0, "IsolationLevel": 0, "UpgradeType": 1}


def _topic_fields(api: int, version: int) -> bool:
    """Whether this request version names a topic (by name, id or as a config resource)."""
    from quotaflow.gateway.auth import resources

    return any(f.kind in ("topicName", resources.TOPIC_ID, resources.CONFIG_RESOURCE)
               for f in resources.fields_at(protocol.REQUESTS[api], version))


def _value(spec: dict[str, Any], topic: str, topic_id: uuid.UUID) -> Any:
    name, ftype, entity = spec["name"], str(spec["type"]), spec.get("entityType")
    if entity == "topicName" or name in ("ResourceName", "ResourceNameFilter"):
        return topic
    if ftype == "uuid":
        return topic_id if name.endswith("TopicId") else uuid.UUID(int=0)
    if entity == "groupId" or name in ("Key", "CoordinatorKeys"):
        return NOACL_GROUP
    if entity == "transactionalId":
        return NOACL_TXN
    if ftype in ("int8", "int16", "uint16", "int32", "int64"):
        return _INTS.get(name, 0)
    if ftype == "bool":
        return name == "ValidateOnly"  # never create anything, were it forwarded
    if ftype == "float64":
        return 0.0
    if ftype in ("bytes", "records"):
        return None if spec.get("nullableVersions") else b""
    if name == "Principal" or name == "PrincipalFilter":
        return "User:bob"
    if name == "Host" or name == "HostFilter":
        return "*"
    return "x" if ftype == "string" else None


def _filled(owner: Any, version: int, topic: str, topic_id: uuid.UUID) -> dict[str, Any]:
    """Every field of ``owner`` at ``version`` given a value (arrays one element), resource fields naming
    ``topic`` / ``topic_id`` / the no-ACL group and transactional id."""
    from kafka.protocol.schemas.fields.array import ArrayField
    from kafka.protocol.schemas.fields.struct import StructField
    from kafka.protocol.schemas.fields.struct_array import StructArrayField

    values: dict[str, Any] = {}
    for attr, fld in owner._struct.fields.items():
        if not fld.min_version <= version <= fld.max_version:
            continue
        spec = fld._json
        if isinstance(fld, StructArrayField):
            entry = fld.data_class
            values[attr] = [entry(**_filled(entry, version, topic, topic_id))]
        elif isinstance(fld, StructField):
            entry = fld.data_class
            values[attr] = entry(**_filled(entry, version, topic, topic_id))
        elif isinstance(fld, ArrayField):
            values[attr] = [_value({**spec, "type": str(spec["type"])[2:]}, topic, topic_id)]
        else:
            values[attr] = _value(spec, topic, topic_id)
    return values


def _generated(api: int, version: int, topic: str, topic_id: uuid.UUID) -> Any:
    cls = protocol.REQUESTS[api]
    message = cls[version]
    return message(**_filled(message, version, topic, topic_id))


def test_every_api_and_version_of_the_table_keeps_refused_resources_from_the_upstream(
        stack: Stack, tansu: Tansu) -> None:
    """Issue 34, item 7: for every API the gateway takes and every version it advertises, and one above its
    ceiling: requests naming quotaflow's topic (by name; by id where the version has ids) and, with an authorizer,
    a topic, group and transactional id bob has no ACL on. Nothing of them reaches the upstream (the relay's bytes
    never carry their names or ids), each answer decodes, and a version above the ceiling closes the connection
    before the upstream sees it. In SASL passthrough (the cluster authorizes bob's requests, so those for resources
    he has no ACL on are the cluster's to refuse) every API is generated with quotaflow's topic in each field that
    names a topic or a resource, and none of it reaches the cluster."""
    mode, relay = stack.mode, stack.relay
    targets = [(USAGE, _ensure_topic(tansu, USAGE))]
    if mode["authorizer"]:
        targets.append((NOACL, _ensure_topic(tansu, NOACL)))
    secrets = [n.encode() for n, _ in targets] + [i.bytes for _, i in targets]
    if mode["authorizer"]:
        secrets += [NOACL_GROUP.encode(), NOACL_TXN.encode()]
    with _connected(stack) as wire:
        advertised = _advertised(wire)
    mark = relay.mark()
    sent = 0
    wire = None
    try:
        for api in range(versions.GATE_KEYS):
            ceiling = versions.offered(api, **mode)
            if api in _NOT_GENERATED or protocol.REQUESTS.get(api) is None:
                continue
            lo, hi = advertised.get(api, (1, 0))
            top = ceiling[1] if ceiling is not None else protocol.REQUESTS[api].min_version - 1
            for version in [*range(lo, hi + 1), top + 1]:
                if version > protocol.max_known_version(api):
                    continue  # kafka-python cannot encode it (nor could the gateway read it)
                for topic, topic_id in targets:
                    if stack.user is None and not _topic_fields(api, version):
                        continue  # without an authorizer only quotaflow's topics are refused
                    if wire is None:
                        wire = _open(stack)
                    wire.send(_generated(api, version, topic, topic_id), version)
                    sent += 1
                    where = (protocol.api_name(api), version, topic)
                    if version > top:
                        assert wire.closed(10.0), where
                        wire.sock.close()
                        wire = None
                        assert not [s for s in relay.since(mark) if (s.api_key, s.version) == (api, version)], where
                        continue
                    answer = protocol.RESPONSES[api].decode(wire.recv(), version=version, header=True)
                    assert answer.header.correlation_id == wire.cid, where
    finally:
        if wire is not None:
            wire.sock.close()
    assert sent >= 50  # (92 without an authorizer, more with one or in passthrough)
    for seen in relay.since(mark):
        for secret in secrets:
            assert secret not in seen.frame, (protocol.api_name(seen.api_key), seen.version, secret)
