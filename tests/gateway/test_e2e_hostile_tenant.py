"""Issue 19's hostile sequence, replayed with real clients (kafka-python, librdkafka) through a gateway in front of
tansu with ``--store kafka://``: SASL/PLAIN terminated at the gateway, users ``admin`` (``--admin-principal``) and
``bob``, ``quotaflow.quota.scope=cluster`` (so ``__quotaflow_usage`` exists). As bob, and as admin where the issue
says "admins too", nothing of quotaflow's own topics is readable, writable, listable or deletable; KIP-554 is refused
to non-admins and answered from the gateway's own credentials; tenants are kept apart once the gateway has an
authorizer; and every other client keeps working through the same gateway.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import TopicAuthorizationFailedError
from kafka.protocol.admin import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from quotaflow.core.acl import AclOperation, ResourceType
from quotaflow.core.entities import QuotaEntity
from quotaflow.events import AUTHORIZATIONS_DIR
from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.server import GatewayThread
from quotaflow.store import open_store
from quotaflow.store.kafka import KafkaStore
from quotaflow.store.scram import scram_credential
from quotaflow.testing.tansu import Tansu

from .authz_gateway import start_authorizing_gateway
from .gateway_wire import Wire
from .memory_authorizer import Acl, MemoryAuthorizer

pytestmark = pytest.mark.broker

USAGE = "__quotaflow_usage"
BOB = QuotaEntity(user="bob")
TOPIC_AUTHORIZATION_FAILED = 29
GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}  # tansu holds a join for the session timeout


def _config(tmp_path: Path) -> GatewayConfig:
    return GatewayConfig.from_properties({
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT",
        "quotaflow.quota.scope": "cluster",
    })


def _sasl(user: str) -> dict[str, Any]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": f"{user}-secret", "log_level": 0}


def _kp(bootstrap: str, user: str, password: str | None = None) -> dict[str, Any]:
    return {"bootstrap_servers": bootstrap, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": user, "sasl_plain_password": password or f"{user}-secret",
            "request_timeout_ms": 10_000}


@pytest.fixture
def fleet(tansu: Tansu, tmp_path: Path) -> Iterator[tuple[GatewayThread, GatewayThread, str, MemoryAuthorizer]]:
    """Two gateways on one kafka:// store whose topic has an ordinary-looking name (configured names are hidden,
    not only the ``__quotaflow`` prefix): the first as in the issue (no authorizer, ``--admin-principal admin``),
    the second with Kafka's authorizer (super user admin; the test adds ACLs)."""
    store_topic = f"qf-store-{uuid.uuid4().hex[:8]}"
    url = f"kafka://{tansu.bootstrap}/{store_topic}"
    with KafkaStore(url) as store:
        for user in ("admin", "bob", "alice"):
            store.put_credential(hash_password(user, f"{user}-secret", iterations=1000))
        store.alter([(BOB, {"producer_byte_rate": 2000.0})])
    authorizer = MemoryAuthorizer(super_users=frozenset({"User:admin"}))
    plain = GatewayThread(tansu.bootstrap, {"SASL_PLAINTEXT": "127.0.0.1:0"}, url, config=_config(tmp_path),
                          admin_principals=frozenset({"admin"}), event_log=tmp_path / "events")
    acl = GatewayThread(tansu.bootstrap, {"SASL_PLAINTEXT": "127.0.0.1:0"}, url, config=_config(tmp_path),
                        admin_principals=frozenset({"admin"}), event_log=tmp_path / "events-acl",
                        authorizer=authorizer, broker="gateway-acl")
    plain.start()
    try:
        acl.start()
        try:
            yield plain, acl, store_topic, authorizer
        finally:
            acl.stop()
    finally:
        plain.stop()


class _wire_as:
    """A raw connection authenticated with SASL/PLAIN as ``user``."""

    def __init__(self, gw: GatewayThread, user: str) -> None:
        self.wire = Wire(gw.address())
        self.wire.send(SaslHandshakeRequest[1](mechanism="PLAIN"), 1)
        assert SaslHandshakeResponse.decode(self.wire.recv(), version=1, header=True).error_code == 0
        self.wire.send(SaslAuthenticateRequest[1](auth_bytes=f"\0{user}\0{user}-secret".encode()), 1)
        assert SaslAuthenticateResponse.decode(self.wire.recv(), version=1, header=True).error_code == 0

    def __enter__(self) -> Wire:
        return self.wire

    def __exit__(self, *exc: object) -> None:
        self.wire.sock.close()


def _fetch_topic(name: str) -> Any:
    return FetchRequest.FetchTopic(topic=name, partitions=[FetchRequest.FetchTopic.FetchPartition(
        partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1, partition_max_bytes=1 << 20)])


def _produce_error(bootstrap: str, user: str, topic: str, key: bytes, value: bytes) -> Any:
    producer = Producer({"bootstrap.servers": bootstrap, **_sasl(user), "message.timeout.ms": 10_000,
                         "allow.auto.create.topics": False})
    errors: list[Any] = []
    producer.produce(topic, value, key=key, partition=0, on_delivery=lambda err, _m: errors.append(err))
    producer.flush(20)
    assert len(errors) == 1
    return errors[0]


def test_the_hostile_sequence_holds(fleet: tuple[GatewayThread, GatewayThread, str, MemoryAuthorizer],
                                    tansu: Tansu) -> None:
    gw, acl_gw, store_topic, authorizer = fleet
    bootstrap = gw.bootstrap()
    hidden = (store_topic, USAGE)
    url = f"kafka://{tansu.bootstrap}/{store_topic}"
    # the topics do exist upstream (the store and the usage exchange created them)
    upstream_topics = AdminClient({"bootstrap.servers": tansu.bootstrap}).list_topics(timeout=10).topics
    assert store_topic in upstream_topics and USAGE in upstream_topics

    # an ordinary tenant topic, alive throughout: "every other client unaffected"
    own = f"alice-{uuid.uuid4().hex[:6]}"
    alice_admin = AdminClient({"bootstrap.servers": bootstrap, **_sasl("alice")})
    alice_admin.create_topics([NewTopic(own, 1, 1)])[own].result(20)

    # 1. bob reads the store topic from offset 0: refused; it is not even listed (all topics, regex)
    consumer = KafkaConsumer(**_kp(bootstrap, "bob"), enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        assert not set(hidden) & set(consumer.topics())
        consumer.assign([TopicPartition(store_topic, 0)])
        consumer.seek(TopicPartition(store_topic, 0), 0)
        # kafka-python never learns a leader for a topic whose metadata says 29, so it has nothing to fetch from
        assert not any(consumer.poll(timeout_ms=300) for _ in range(5))
    finally:
        consumer.close()
    # the Fetch itself, as a hostile client writes it: 29 for the store topic, the rest of the request served
    with _wire_as(gw, "bob") as wire:
        wire.send(FetchRequest[11](replica_id=-1, max_wait_ms=10, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                                   session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[], topics=[
                                       _fetch_topic(store_topic), _fetch_topic(own)]), 11)
        fetched = FetchResponse.decode(wire.recv(), version=11, header=True)
        errors = {t.topic: [p.error_code for p in t.partitions] for t in fetched.responses}
        assert errors == {store_topic: [TOPIC_AUTHORIZATION_FAILED], own: [0]}
        assert all(not p.records for t in fetched.responses if t.topic == store_topic for p in t.partitions)
    for user in ("bob", "admin"):  # admins too
        metadata = AdminClient({"bootstrap.servers": bootstrap, **_sasl(user)}).list_topics(timeout=10)
        assert not set(hidden) & set(metadata.topics) and own in metadata.topics
        named = AdminClient({"bootstrap.servers": bootstrap, **_sasl(user)}).list_topics(topic=store_topic,
                                                                                        timeout=10)
        assert named.topics[store_topic].error.code() == TOPIC_AUTHORIZATION_FAILED
    regex = Consumer({"bootstrap.servers": bootstrap, **_sasl("bob"), "group.id": f"g-{uuid.uuid4().hex[:6]}",
                      "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 500, **GROUP})
    try:
        regex.subscribe(["^.*"])
        deadline = time.monotonic() + 60
        assigned: set[str] = set()
        while time.monotonic() < deadline and own not in assigned:
            regex.poll(0.2)
            assigned = {tp.topic for tp in regex.assignment()}
        assert own in assigned and not set(hidden) & assigned
    finally:
        regex.close()

    # 2. and 3. bob forges his quota record and a credential record for admin: refused, nothing changes
    for key, value in ((b'["quota",[["user","bob"]],["producer_byte_rate"]]',
                        b'{"entity":[["user","bob"]],"ops":{"producer_byte_rate":2e9},"ts":1}'),
                       (b'["credential","admin"]', b'{"user":"admin","salt":"AA==","iterations":1,"hash":"AA=="}')):
        for user in ("bob", "admin"):
            err = _produce_error(bootstrap, user, store_topic, key, value)
            assert err is not None and err.code() == TOPIC_AUTHORIZATION_FAILED
    kp = KafkaProducer(**_kp(bootstrap, "bob"), max_block_ms=10_000, retries=0)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            kp.send(store_topic, b"x", key=b"y", partition=0).get(timeout=15)
    finally:
        kp.close()
    with KafkaStore(url) as store:
        assert store.get(BOB) == {"producer_byte_rate": 2000.0}
    admin_ok = KafkaProducer(**_kp(bootstrap, "admin"), max_block_ms=10_000)  # admin's own password still works
    admin_ok.close()

    # 4. bob produces to the usage topic, deletes both topics (and his own scratch topic in the same request)
    err = _produce_error(bootstrap, "bob", USAGE, b"gw", b"{}")
    assert err is not None and err.code() == TOPIC_AUTHORIZATION_FAILED
    scratch = f"bob-{uuid.uuid4().hex[:6]}"
    bob_admin = AdminClient({"bootstrap.servers": bootstrap, **_sasl("bob")})
    bob_admin.create_topics([NewTopic(scratch, 1, 1)])[scratch].result(20)
    for user in ("bob", "admin"):
        client = AdminClient({"bootstrap.servers": bootstrap, **_sasl(user)})
        names = [*hidden, scratch] if user == "bob" else list(hidden)
        futures = client.delete_topics(names, operation_timeout=10)
        for name in hidden:
            with pytest.raises(KafkaException) as refused:
                futures[name].result(20)
            assert refused.value.args[0].code() == TOPIC_AUTHORIZATION_FAILED
        if user == "bob":
            futures[scratch].result(20)  # the rest of the request is served
        # creating one of them again is refused too
        with pytest.raises(KafkaException) as created:
            client.create_topics([NewTopic(USAGE, 1, 1)])[USAGE].result(20)
        assert created.value.args[0].code() == TOPIC_AUTHORIZATION_FAILED
    upstream_topics = AdminClient({"bootstrap.servers": tansu.bootstrap}).list_topics(timeout=10).topics
    assert store_topic in upstream_topics and USAGE in upstream_topics and scratch not in upstream_topics

    # 5. KIP-554: refused for bob (nothing reaches the upstream), answered from the gateway's store for admin
    upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                          b"carol-secret")
    results = bob_admin.alter_user_scram_credentials([upsert])
    with pytest.raises(KafkaException) as denied:
        results["carol"].result(20)
    assert denied.value.args[0].code() == 31  # CLUSTER_AUTHORIZATION_FAILED
    # describe refused: Kafka's answer, the error at the top and per named user (librdkafka 2.16 aborts the
    # process on a top-level error in this response, Kafka's own included, so it is read with kafka-python here)
    with _wire_as(gw, "bob") as wire:
        wire.send(DescribeUserScramCredentialsRequest[0](users=None), 0)
        answer = DescribeUserScramCredentialsResponse.decode(wire.recv(), version=0, header=True)
        # ApiError.fromThrowable: the generic error's message goes out null
        assert (answer.error_code, answer.error_message, answer.results) == (31, None, [])
        wire.send(DescribeUserScramCredentialsRequest[0](users=[
            DescribeUserScramCredentialsRequest.UserName(name="admin")]), 0)
        answer = DescribeUserScramCredentialsResponse.decode(wire.recv(), version=0, header=True)
        assert answer.error_code == 31 and [r.error_code for r in answer.results] == [31]
    admin = AdminClient({"bootstrap.servers": bootstrap, **_sasl("admin")})
    admin.alter_user_scram_credentials([upsert])["carol"].result(20)
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(20)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == \
        [(ScramMechanism.SCRAM_SHA_256, 4096)]
    carol = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol", "sasl.password": "carol-secret",
                      "log_level": 0})
    delivered: list[Any] = []
    carol.produce(own, b"from carol", on_delivery=lambda e, _m: delivered.append(e))
    carol.flush(20)
    assert delivered == [None]

    # 6. tenants apart: through the gateway with an authorizer (same store), bob may neither read nor write
    # alice's topic; alice keeps both; hidden topics stay hidden for the super user
    authorizer.acls += [Acl("User:alice", AclOperation.ALL, ResourceType.TOPIC, "alice-", prefixed=True),
                        Acl("User:alice", AclOperation.READ, ResourceType.GROUP, "*"),
                        Acl("User:bob", AclOperation.ALL, ResourceType.TOPIC, "bob-", prefixed=True),
                        Acl("User:bob", AclOperation.READ, ResourceType.GROUP, "*")]
    secure = acl_gw.bootstrap()
    err = _produce_error(secure, "bob", own, b"k", b"bob was here")
    assert err is not None and err.code() == TOPIC_AUTHORIZATION_FAILED
    bob_view = AdminClient({"bootstrap.servers": secure, **_sasl("bob")}).list_topics(timeout=10).topics
    assert own not in bob_view and not set(hidden) & set(bob_view)
    assert _produce_error(secure, "alice", own, b"k", b"alice") is None
    with _wire_as(acl_gw, "bob") as wire:
        wire.send(FetchRequest[11](replica_id=-1, max_wait_ms=10, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                                   session_id=0, session_epoch=0, rack_id="", forgotten_topics_data=[], topics=[
                                       _fetch_topic(own)]), 11)
        fetched = FetchResponse.decode(wire.recv(), version=11, header=True)
        assert [(t.topic, [p.error_code for p in t.partitions]) for t in fetched.responses] == \
            [(own, [TOPIC_AUTHORIZATION_FAILED])]
    reader = Consumer({"bootstrap.servers": secure, **_sasl("alice"), "group.id": f"a-{uuid.uuid4().hex[:6]}",
                       "auto.offset.reset": "earliest", **GROUP})
    try:
        reader.subscribe([own])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(values) < 2:
            msg = reader.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
        assert values == [b"from carol", b"alice"]
        reader.commit(asynchronous=False)
    finally:
        reader.close()
    super_view = AdminClient({"bootstrap.servers": secure, **_sasl("admin")}).list_topics(timeout=10).topics
    assert own in super_view and not set(hidden) & set(super_view)
    # the refusals are counted for /metrics and written to the event log (who, from where, what, which API)
    assert gw.gateway is not None and acl_gw.gateway is not None
    assert sum(gw.gateway.authz_audit.hidden.values()) >= 10
    assert any(not allowed for (_api, _rt, _op, allowed) in acl_gw.gateway.authz_audit.counts)
    rows = []
    for thread in (gw, acl_gw):
        gw_log = thread.gateway._event_log if thread.gateway is not None else None
        assert gw_log is not None
        gw_log.flush()
        rows += pq.read_table(gw_log.directory / AUTHORIZATIONS_DIR).to_pylist()
    assert {(r["principal"], r["resource_name"], r["operation"], r["api_key"]) for r in rows if r["hidden_topic"]} \
        >= {("User:bob", store_topic, "DESCRIBE", 3), ("User:admin", USAGE, "DELETE", 20), ("User:bob", store_topic,
                                                                                         "READ", 1)}
    assert {("User:bob", own, "DESCRIBE", False), ("User:bob", own, "READ", False)} <= {
        (r["principal"], r["resource_name"], r["operation"], r["allowed"]) for r in rows if not r["hidden_topic"]}
    assert all(r["client_ip"] == "127.0.0.1" and not r["allowed"] for r in rows)


def test_passthrough_hides_quotaflows_topics_and_leaves_kip554_to_the_upstream(tansu: Tansu,
                                                                                 tmp_path: Path) -> None:
    """SASL passthrough: the upstream (here a gateway terminating SASL in front of tansu, as in
    test_e2e_sasl_passthrough) authenticates and authorizes; the front gateway still hides its own store topic, and
    DescribeUserScramCredentials reaches the upstream, which answers from its own users."""
    store_topic = f"qf-front-{uuid.uuid4().hex[:8]}"
    cluster_db = tmp_path / "cluster.db"
    with open_store(cluster_db) as store:
        store.put_credential(hash_password("alice", "alice-secret", iterations=1000))
        store.put_scram_credential(scram_credential("upstream-user", "SCRAM-SHA-512", "pw", iterations=4096))
    sasl = {"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT"}
    cluster = GatewayThread(tansu.bootstrap, {"SASL_PLAINTEXT": "127.0.0.1:0"}, cluster_db,
                            config=GatewayConfig.from_properties(sasl), admin_principals=frozenset({"alice"}))
    cluster.start()
    try:
        front = GatewayThread(cluster.bootstrap(), {"SASL_PLAINTEXT": "127.0.0.1:0"},
                              f"kafka://{tansu.bootstrap}/{store_topic}", config=GatewayConfig.from_properties(
                                  {**sasl, "quotaflow.upstream.security.protocol": "SASL_PLAINTEXT"}))
        front.start()
        try:
            assert front.gateway is not None and front.gateway.sasl_passthrough
            bootstrap = front.bootstrap()
            admin = AdminClient({"bootstrap.servers": bootstrap, **_sasl("alice")})
            assert store_topic not in admin.list_topics(timeout=10).topics
            err = _produce_error(bootstrap, "alice", store_topic, b"k", b"v")
            assert err is not None and err.code() == TOPIC_AUTHORIZATION_FAILED
            with pytest.raises(KafkaException) as refused:
                admin.delete_topics([store_topic], operation_timeout=10)[store_topic].result(20)
            assert refused.value.args[0].code() == TOPIC_AUTHORIZATION_FAILED
            described = admin.describe_user_scram_credentials().result(20)
            assert set(described) == {"upstream-user"}  # the upstream's users, not the front gateway's
        finally:
            front.stop()
    finally:
        cluster.stop()
    with KafkaStore(f"kafka://{tansu.bootstrap}/{store_topic}") as store:
        assert store.list_credentials() == []  # nothing was written to the hidden topic


def test_an_acl_granted_and_revoked_through_the_gateway_rules_the_next_produce_and_fetch(
        tansu: Tansu, tmp_path: Path) -> None:
    """Kafka's StandardAuthorizer from ``--config`` (super user admin): bob may neither produce nor fetch until
    admin's CreateAcls (librdkafka) grants it, and is refused again once DeleteAcls revokes it: the cached decisions
    follow the store's ACLs."""
    from confluent_kafka.admin import AclBinding, AclBindingFilter, AclPermissionType, ResourcePatternType
    from confluent_kafka.admin import AclOperation as RdOp
    from confluent_kafka.admin import ResourceType as RdType

    gw = start_authorizing_gateway(tansu.bootstrap, tmp_path)
    try:
        bootstrap = gw.bootstrap()
        topic = f"grant-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap, **_sasl("admin")})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)

        def fetch_error() -> int:
            with _wire_as(gw, "bob") as wire:
                wire.send(FetchRequest[11](replica_id=-1, max_wait_ms=10, min_bytes=0, max_bytes=1 << 20,
                                           isolation_level=0, session_id=0, session_epoch=0, rack_id="",
                                           forgotten_topics_data=[], topics=[_fetch_topic(topic)]), 11)
                answer = FetchResponse.decode(wire.recv(), version=11, header=True)
                return int(answer.responses[0].partitions[0].error_code)

        def produce_error() -> int | None:
            err = _produce_error(bootstrap, "bob", topic, b"k", b"v")
            return None if err is None else int(err.code())

        assert produce_error() == TOPIC_AUTHORIZATION_FAILED and fetch_error() == TOPIC_AUTHORIZATION_FAILED
        grants = [AclBinding(RdType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*", op,
                             AclPermissionType.ALLOW) for op in (RdOp.WRITE, RdOp.READ)]
        for future in admin.create_acls(grants, request_timeout=20).values():
            future.result()
        assert produce_error() is None and fetch_error() == 0  # the authorizer is reloaded when the ACLs change
        match = AclBindingFilter(RdType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", None, RdOp.ANY,
                                 AclPermissionType.ANY)
        assert len(admin.delete_acls([match], request_timeout=20)[match].result()) == 2
        deadline = time.monotonic() + 10
        while fetch_error() != TOPIC_AUTHORIZATION_FAILED:
            assert time.monotonic() < deadline, "the revoked ACL still allows bob's fetch"
            time.sleep(0.1)
        assert produce_error() == TOPIC_AUTHORIZATION_FAILED
    finally:
        gw.stop()


def test_a_delete_under_a_mutation_quota_never_looks_up_topics_the_client_may_not_name(
        tansu: Tansu, tmp_path: Path) -> None:
    """KIP-599 meters DeleteTopics by the topics' partition counts, which the gateway asks the upstream for with its
    own connection before the request is decided. bob (under a controller-mutation quota, ALL on ``bob-*``) names
    one of quotaflow's own topics, alice's topic and his own: only his own is looked up (the others are refused
    with 29 and cost nothing), so the gateway lends him no rights and neither the throttle nor the timing says
    whether the others exist or how many partitions they have."""
    from quotaflow.admin import Admin, Alteration
    from quotaflow.admin.acls import AclAdmin
    from quotaflow.core.acl import AccessControlEntry, AclBinding, AclPermissionType, PatternType, ResourcePattern
    from quotaflow.gateway.data.partition_counts import PartitionCounts

    with open_store(tmp_path / "q.db") as store:
        Admin(store).alter([Alteration.of(BOB, {"controller_mutation_rate": 1.0})])
        AclAdmin(store).create([AclBinding(ResourcePattern(ResourceType.TOPIC, "bob-", PatternType.PREFIXED),
                                           AccessControlEntry("User:bob", "*", AclOperation.ALL,
                                                              AclPermissionType.ALLOW))])
    tag = uuid.uuid4().hex[:6]
    mine, alices, hidden = f"bob-{tag}", f"alice-{tag}", f"__quotaflow_probe-{tag}"
    upstream = AdminClient({"bootstrap.servers": tansu.bootstrap})
    for name, partitions in ((mine, 2), (alices, 5), (hidden, 3)):
        upstream.create_topics([NewTopic(name, partitions, 1)])[name].result(20)
    gw = start_authorizing_gateway(tansu.bootstrap, tmp_path)
    try:
        gateway = gw.gateway
        assert gateway is not None
        counts = gateway.partition_counts
        asked: list[list[str]] = []

        async def recording(names: Any, ids: Any = ()) -> None:
            names = list(names)
            asked.append(sorted(names))
            await PartitionCounts.refresh(counts, names, ids)

        counts.refresh = recording  # type: ignore[method-assign]
        with _wire_as(gw, "bob") as wire:
            wire.send(DeleteTopicsRequest[5](topic_names=[hidden, alices, mine], timeout_ms=10_000), 5)
            response = DeleteTopicsResponse.decode(wire.recv(), version=5, header=True)
        assert {r.name: r.error_code for r in response.responses} == {
            hidden: TOPIC_AUTHORIZATION_FAILED, alices: TOPIC_AUTHORIZATION_FAILED, mine: 0}
        assert asked == [[mine]]
        assert hidden not in counts.by_name and alices not in counts.by_name
        left = upstream.list_topics(timeout=10).topics
        assert hidden in left and alices in left
    finally:
        gw.stop()
