"""Issue 34's attacks on the version gate, over the raw wire through a gateway in front of tansu, with a recording
relay between the gateway and tansu (what reached the upstream): requests of versions the gateway does not
advertise, which its per-version readers never looked at.

* DeleteTopics v6 (the gateway advertises 0-5) by name deleted ``__quotaflow_usage`` (its planner read the v0-5
  field, found it empty and forwarded), and by topic id any topic;
* Fetch v13 / v16 by topic id returned quotaflow's own topics' records (a request by id has no name to look for);
* Produce v13 by topic id was forwarded as well.

Every one is refused as Kafka refuses a version it does not support (the connection closed) without a byte reaching
the upstream, with and without an authorizer; the topic is still there and holds what it held.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import pytest
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest
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


@pytest.fixture(scope="module")
def relay(tansu: Tansu) -> Iterator[RecordingUpstream]:
    with RecordingUpstream(tansu.bootstrap) as upstream:
        yield upstream


@pytest.fixture(scope="module", params=["no-authorizer", "authorizer"])
def gateway(request: pytest.FixtureRequest, relay: RecordingUpstream,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayThread, str | None]]:
    """A gateway in front of the relay: PLAINTEXT without an authorizer, or Kafka's authorizer with SASL/PLAIN
    (users admin, the super user, and bob, with no ACL); the user a test connects as."""
    workdir = tmp_path_factory.mktemp(request.param)
    if request.param == "authorizer":
        gw = start_authorizing_gateway(relay.bootstrap, workdir)
        user: str | None = "bob"
    else:
        gw = GatewayThread(relay.bootstrap, {"PLAINTEXT": "127.0.0.1:0"}, workdir / "q.db").start()
        user = None
    try:
        yield gw, user
    finally:
        gw.stop()


def _open(gw: GatewayThread, user: str | None) -> Wire:
    """A raw connection to the gateway, authenticated as ``user`` with SASL/PLAIN (None: PLAINTEXT)."""
    wire = Wire(gw.address())
    if user is not None:
        wire.send(SaslHandshakeRequest[1](mechanism="PLAIN"), 1)
        assert SaslHandshakeResponse.decode(wire.recv(), version=1, header=True).error_code == 0
        wire.send(SaslAuthenticateRequest[1](auth_bytes=f"\0{user}\0{user}-secret".encode()), 1)
        assert SaslAuthenticateResponse.decode(wire.recv(), version=1, header=True).error_code == 0
    return wire


@contextmanager
def _connected(gw: GatewayThread, user: str | None) -> Iterator[Wire]:
    wire = _open(gw, user)
    try:
        yield wire
    finally:
        wire.sock.close()


def _advertised(wire: Wire) -> dict[int, tuple[int, int]]:
    wire.send(ApiVersionsRequest[3](client_software_name="gate-test", client_software_version="1"), 3)
    answer = ApiVersionsResponse.decode(wire.recv(), version=3, header=True)
    return {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}


def _refused_unseen(gw: GatewayThread, user: str | None, relay: RecordingUpstream, request: Any, version: int,
                    ) -> None:
    """``request`` at ``version`` closes the connection and never reaches the upstream (while an ordinary request
    on the same connection first does: the relay does see this gateway's requests)."""
    with _connected(gw, user) as wire:
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


def test_delete_topics_v6_by_name_or_id_never_reaches_the_upstream(
        gateway: tuple[GatewayThread, str | None], relay: RecordingUpstream, tansu: Tansu) -> None:
    gw, user = gateway
    usage_id = _ensure_topic(tansu, USAGE)
    ordinary = f"gate-{uuid.uuid4().hex[:8]}"
    ordinary_id = _ensure_topic(tansu, ordinary)
    state = DeleteTopicsRequest[6].DeleteTopicState
    for topic in (state(name=USAGE, topic_id=uuid.UUID(int=0)), state(name=None, topic_id=usage_id),
                  state(name=None, topic_id=ordinary_id)):
        _refused_unseen(gw, user, relay, DeleteTopicsRequest[6](topics=[topic], timeout_ms=5000), 6)
    assert _topic_id(tansu, USAGE) == usage_id and _topic_id(tansu, ordinary) == ordinary_id


@pytest.mark.parametrize("version", [13, 16])
def test_fetch_by_topic_id_never_reaches_the_upstream(
        gateway: tuple[GatewayThread, str | None], relay: RecordingUpstream, tansu: Tansu, version: int) -> None:
    gw, user = gateway
    usage_id = _ensure_topic(tansu, USAGE)
    partition = FetchRequest.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                       last_fetched_epoch=-1, log_start_offset=-1,
                                                       partition_max_bytes=1 << 20)
    request = FetchRequest[version](replica_id=-1, max_wait_ms=10, min_bytes=0, max_bytes=1 << 20,
                                    isolation_level=0, session_id=0, session_epoch=-1,
                                    topics=[FetchRequest.FetchTopic(topic_id=usage_id, partitions=[partition])],
                                    forgotten_topics_data=[], rack_id="")
    _refused_unseen(gw, user, relay, request, version)


def test_produce_v13_by_topic_id_never_reaches_the_upstream(
        gateway: tuple[GatewayThread, str | None], relay: RecordingUpstream, tansu: Tansu) -> None:
    gw, user = gateway
    usage_id = _ensure_topic(tansu, USAGE)
    before = _end_offset(tansu, USAGE)
    data = ProduceRequest.TopicProduceData
    request = ProduceRequest[13](transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        data(topic_id=usage_id, partition_data=[data.PartitionProduceData(index=0, records=_records())])])
    _refused_unseen(gw, user, relay, request, 13)
    assert _end_offset(tansu, USAGE) == before


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
        gateway: tuple[GatewayThread, str | None], relay: RecordingUpstream, tansu: Tansu) -> None:
    """Issue 34, item 7: for every API the gateway takes and every version it advertises, and one above its
    ceiling: requests naming quotaflow's topic (by name; by id where the version has ids) and, with an authorizer,
    a topic, group and transactional id bob has no ACL on. Nothing of them reaches the upstream (the relay's bytes
    never carry their names or ids), each answer decodes, and a version above the ceiling closes the connection
    before the upstream sees it."""
    gw, user = gateway
    mode = {"sasl_passthrough": False, "authorizer": user is not None}
    targets = [(USAGE, _ensure_topic(tansu, USAGE))]
    if user is not None:
        targets.append((NOACL, _ensure_topic(tansu, NOACL)))
    secrets = [n.encode() for n, _ in targets] + [i.bytes for _, i in targets]
    if user is not None:
        secrets += [NOACL_GROUP.encode(), NOACL_TXN.encode()]
    with _connected(gw, user) as wire:
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
                    if user is None and not _topic_fields(api, version):
                        continue  # without an authorizer only quotaflow's topics are refused
                    if wire is None:
                        wire = _open(gw, user)
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
    assert sent >= 50  # (92 without an authorizer, more with one, against tansu)
    for seen in relay.since(mark):
        for secret in secrets:
            assert secret not in seen.frame, (protocol.api_name(seen.api_key), seen.version, secret)
