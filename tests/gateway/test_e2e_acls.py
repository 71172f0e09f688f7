"""CreateAcls / DescribeAcls / DeleteAcls answered by real gateways in front of tansu, through kafka-python's and
librdkafka's admin clients: Kafka's answers (CLUSTER_AUTHORIZATION_FAILED for a non-super user, SECURITY_DISABLED
without an authorizer, per-binding validation errors), the running authorizer following every change, and two
gateways on one ``kafka://`` store seeing each other's ACLs within a second or two."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import ClusterAuthorizationFailedError, SecurityDisabledError

from quotaflow.core import acl as qacl
from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.gateway.server import GatewayThread
from quotaflow.store import open_store
from quotaflow.testing.tansu import Tansu

from .conftest import GatewayFactory, RunningGateway

pytestmark = pytest.mark.broker

AUTHORIZER = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
USERS = {"admin": "admin-secret", "bob": "bob-secret"}


def _users(store: Any) -> None:
    for user, password in USERS.items():
        store.put_credential(hash_password(user, password, iterations=1000))


def _kp_admin(bootstrap: str, user: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                            sasl_plain_username=user, sasl_plain_password=USERS[user], request_timeout_ms=20_000)


def _rd_admin(bootstrap: str, user: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user]})


def _wait(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture
def authz_gateway(gateway_factory: GatewayFactory, tmp_path: Path) -> RunningGateway:
    config = tmp_path / "server.properties"
    config.write_text(AUTHORIZER + "super.users=User:admin\n")
    store = tmp_path / "authz.db"
    with open_store(store) as qs:
        _users(qs)
    return gateway_factory(store=store, config_path=config)


def _read_acl(topic: str, principal: str = "User:bob") -> ACL:
    return ACL(principal, "*", ACLOperation.READ, ACLPermissionType.ALLOW,
               ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))


def test_kafka_python_admin_manages_acls_and_the_authorizer_follows(authz_gateway: RunningGateway) -> None:
    gw = authz_gateway.thread.gateway
    topic = f"acl-{uuid.uuid4().hex[:6]}"
    admin = _kp_admin(authz_gateway.bootstrap, "admin")
    try:
        prefixed = ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                       ResourcePattern(ResourceType.TOPIC, "pay-", ACLResourcePatternType.PREFIXED))
        result = admin.create_acls([_read_acl(topic), prefixed])
        assert len(result["succeeded"]) == 2 and not result["failed"], result
        # the gateway's own authorizer has them before the next request (reloaded on the change)
        assert gw.authorizer.authorize("User:bob", "127.0.0.1", qacl.AclOperation.READ, qacl.ResourceType.TOPIC,
                                       topic)
        assert gw.authorizer.authorize("User:bob", "10.9.9.9", qacl.AclOperation.DESCRIBE, qacl.ResourceType.TOPIC,
                                       "pay-eu")
        assert not gw.authorizer.authorize("User:bob", "127.0.0.1", qacl.AclOperation.WRITE,
                                           qacl.ResourceType.TOPIC, topic)
        acls, error = admin.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                    ResourcePatternFilter(ResourceType.TOPIC, "pay-eu",
                                                                          ACLResourcePatternType.MATCH)))
        assert error is None or error.errno == 0
        assert [(a.resource_pattern.resource_name, a.operation) for a in acls] == [("pay-", ACLOperation.WRITE)]
        [(_f, deleted, err)] = admin.delete_acls([ACLFilter(
            "User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))])
        assert err is None or err.errno == 0
        assert [a.resource_pattern.resource_name for a in deleted] == [topic]
        assert not gw.authorizer.authorize("User:bob", "127.0.0.1", qacl.AclOperation.READ,
                                           qacl.ResourceType.TOPIC, topic)
    finally:
        admin.close()


def _kp_filter(rt: ResourceType, name: str | None, pt: ACLResourcePatternType,
               principal: str | None = None) -> ACLFilter:
    return ACLFilter(principal, None, ACLOperation.ANY, ACLPermissionType.ANY, ResourcePatternFilter(rt, name, pt))


def _qf_filter(f: ACLFilter) -> qacl.AclBindingFilter:
    p = f.resource_pattern
    return qacl.AclBindingFilter(
        qacl.ResourcePatternFilter(qacl.ResourceType(p.resource_type.value), p.resource_name,
                                   qacl.PatternType(p.pattern_type.value)),
        qacl.AccessControlEntryFilter(f.principal, f.host, qacl.AclOperation(f.operation.value),
                                      qacl.AclPermissionType(f.permission_type.value)))


def _kp_rows(acls: list[ACL]) -> list[tuple[int, str, int, str, str, int, int]]:
    return [(a.resource_pattern.resource_type.value, a.resource_pattern.resource_name,
             a.resource_pattern.pattern_type.value, a.principal, a.host, a.operation.value, a.permission_type.value)
            for a in acls]


def _rows(bindings: list[qacl.AclBinding]) -> list[tuple[int, str, int, str, str, int, int]]:
    return [b.sort_key() for b in bindings]


def test_describe_and_delete_answer_from_the_gateways_index_not_the_stores_whole_set(
        authz_gateway: RunningGateway, monkeypatch: pytest.MonkeyPatch) -> None:
    """ACLs written by the CLI's store handle (as another gateway or ``quotaflow acls`` writes them) are described
    and deleted over the wire at once (the describe brings the gateway's index up to the store first), with the
    answers of the store-backed brute force, and the gateway never reads the store's whole ACL set for them."""
    from quotaflow.admin.acls import AclAdmin

    gw = authz_gateway.thread.gateway
    whole_reads: list[int] = []
    read_all = gw.acl_store.acls
    monkeypatch.setattr(gw.acl_store, "acls", lambda: whole_reads.append(1) or read_all())

    def b(name: str, pt: qacl.PatternType, principal: str, op: qacl.AclOperation) -> qacl.AclBinding:
        return qacl.AclBinding(qacl.ResourcePattern(qacl.ResourceType.TOPIC, name, pt),
                               qacl.AccessControlEntry(principal, "*", op, qacl.AclPermissionType.ALLOW))

    written = [b(f"pay-{i}", qacl.PatternType.LITERAL, f"User:t{i % 3}", qacl.AclOperation.READ) for i in range(150)]
    written += [b("pay-", qacl.PatternType.PREFIXED, "User:t1", qacl.AclOperation.WRITE),
                b("pay-1", qacl.PatternType.PREFIXED, "User:t2", qacl.AclOperation.DESCRIBE),
                b("*", qacl.PatternType.LITERAL, "User:t0", qacl.AclOperation.DESCRIBE),
                b("other", qacl.PatternType.LITERAL, "User:t0", qacl.AclOperation.READ)]
    with open_store(authz_gateway.store_path) as cli:
        cli.add_acls(written)
        brute = AclAdmin(cli)
        filters = [_kp_filter(ResourceType.TOPIC, "pay-12", ACLResourcePatternType.LITERAL),
                   _kp_filter(ResourceType.TOPIC, "pay-12", ACLResourcePatternType.MATCH),
                   _kp_filter(ResourceType.ANY, "pay-", ACLResourcePatternType.PREFIXED),
                   _kp_filter(ResourceType.ANY, "pay-1", ACLResourcePatternType.ANY),
                   _kp_filter(ResourceType.TOPIC, None, ACLResourcePatternType.ANY, principal="User:t2"),
                   _kp_filter(ResourceType.ANY, None, ACLResourcePatternType.ANY)]
        admin = _kp_admin(authz_gateway.bootstrap, "admin")
        try:
            for f in filters:
                acls, error = admin.describe_acls(f)
                assert error is None or error.errno == 0
                expected = _rows(brute.describe(_qf_filter(f)))
                assert expected and _kp_rows(acls) == expected, f
            # every ACL through librdkafka too
            from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType
            from confluent_kafka.admin import ResourceType as RdType

            rd = _rd_admin(authz_gateway.bootstrap, "admin")
            every = rd.describe_acls(AclBindingFilter(RdType.ANY, None, ResourcePatternType.ANY, None, None,
                                                      AclOperation.ANY, AclPermissionType.ANY),
                                     request_timeout=20).result()
            assert sorted((x.name, x.principal) for x in every) == sorted(
                (w.pattern.name, w.entry.principal) for w in written)
            # DeleteAcls: the MATCH of one name and one principal's literal pay-1* ACLs, found the same way
            deleting = [_kp_filter(ResourceType.TOPIC, "pay-7", ACLResourcePatternType.MATCH),
                        _kp_filter(ResourceType.TOPIC, "pay-1", ACLResourcePatternType.PREFIXED)]
            expected_deleted = [_rows(brute.describe(_qf_filter(f))) for f in deleting]
            answered = admin.delete_acls(deleting)
            assert [_kp_rows(deleted) for _f, deleted, _err in answered] == expected_deleted
            assert all(err is None or err.errno == 0 for _f, _d, err in answered)
            gone = {r for rows in expected_deleted for r in rows}
            assert {w.sort_key() for w in cli.acls().bindings} == {w.sort_key() for w in written} - gone
            # the gateway's own authorizer follows the delete (t1 could read pay-7 before)
            assert not gw.authorizer.authorize("User:t1", "127.0.0.1", qacl.AclOperation.READ,
                                               qacl.ResourceType.TOPIC, "pay-7")
            # and a describe right after sees the delete made through this gateway
            acls, _error = admin.describe_acls(_kp_filter(ResourceType.TOPIC, "pay-7",
                                                          ACLResourcePatternType.MATCH))
            assert acls == []
        finally:
            admin.close()
    assert whole_reads == []


def test_non_super_user_gets_cluster_authorization_failed(authz_gateway: RunningGateway) -> None:
    bob = _kp_admin(authz_gateway.bootstrap, "bob")
    try:
        result = bob.create_acls([_read_acl("mine")])
        assert not result["succeeded"]
        assert result["failed"] == [ClusterAuthorizationFailedError]  # kafka-python lists error classes
        with pytest.raises(ClusterAuthorizationFailedError):
            bob.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                        ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)))
    finally:
        bob.close()
    assert authz_gateway.thread.gateway.acl_store.acls().bindings == frozenset()  # nothing was written


def test_an_admin_granted_alter_on_the_cluster_may_manage_acls(authz_gateway: RunningGateway) -> None:
    admin = _kp_admin(authz_gateway.bootstrap, "admin")
    bob = _kp_admin(authz_gateway.bootstrap, "bob")
    try:
        grant = ACL("User:bob", "*", ACLOperation.ALTER, ACLPermissionType.ALLOW,
                    ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", ACLResourcePatternType.LITERAL))
        assert not admin.create_acls([grant])["failed"]
        # ALTER implies DESCRIBE (ALLOW only): bob may now create and describe
        assert not bob.create_acls([_read_acl("bobs")])["failed"]
        acls, _error = bob.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                   ResourcePatternFilter(ResourceType.ANY, None,
                                                                         ACLResourcePatternType.ANY)))
        assert len(acls) == 2
    finally:
        admin.close()
        bob.close()


def test_librdkafka_admin_client(authz_gateway: RunningGateway) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
    )
    from confluent_kafka.admin import ResourceType as RdType

    admin = _rd_admin(authz_gateway.bootstrap, "admin")
    topic = f"rd-{uuid.uuid4().hex[:6]}"
    ok = AclBinding(RdType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*", AclOperation.READ,
                    AclPermissionType.ALLOW)
    cluster = AclBinding(RdType.BROKER, "other-cluster", ResourcePatternType.LITERAL, "User:bob", "*",
                         AclOperation.ALTER, AclPermissionType.ALLOW)
    empty = AclBinding(RdType.TOPIC, "", ResourcePatternType.LITERAL, "User:bob", "*", AclOperation.READ,
                       AclPermissionType.ALLOW)
    futures = admin.create_acls([ok, cluster, empty], request_timeout=20)
    assert futures[ok].result() is None
    for refused_binding, message in ((cluster, "The only valid name for the CLUSTER resource is kafka-cluster"),
                                     (empty, "Invalid empty resource name")):  # a broker's AclApis wording
        with pytest.raises(KafkaException) as refused:
            futures[refused_binding].result()
        error = refused.value.args[0]
        assert error.code() == 42 and message in error.str()
    match_all = AclBindingFilter(RdType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                 AclPermissionType.ANY)
    described = admin.describe_acls(match_all, request_timeout=20).result()
    assert [(b.name, b.principal, b.operation) for b in described] == [(topic, "User:bob", AclOperation.READ)]
    deleted = admin.delete_acls([match_all], request_timeout=20)[match_all].result()
    assert [b.name for b in deleted] == [topic]
    assert admin.describe_acls(match_all, request_timeout=20).result() == []


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(gateway: RunningGateway) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType
    from confluent_kafka.admin import ResourceType as RdType

    with open_store(gateway.store_path) as qs:
        _users(qs)
    admin = _kp_admin(gateway.bootstrap, "bob")
    try:
        result = admin.create_acls([_read_acl("t")])
        assert result["failed"] == [SecurityDisabledError]
        with pytest.raises(SecurityDisabledError, match="No Authorizer is configured on the broker"):
            admin.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                          ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)))
    finally:
        admin.close()
    rd = _rd_admin(gateway.bootstrap, "bob")
    match_all = AclBindingFilter(RdType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                 AclPermissionType.ANY)
    # (librdkafka's describe_acls drops DescribeAcls' top-level error and yields []; create and delete raise it)
    with pytest.raises(KafkaException) as refused:
        rd.delete_acls([match_all], request_timeout=20)[match_all].result()
    assert refused.value.args[0].code() == 54 and refused.value.args[0].str() == "No Authorizer is configured."


@pytest.fixture
def kafka_store_gateways(tansu: Tansu, tmp_path: Path) -> Iterator[tuple[GatewayThread, GatewayThread]]:
    url = f"kafka://{tansu.bootstrap}/acls-{uuid.uuid4().hex[:8]}"
    with open_store(url) as qs:
        _users(qs)
    config = tmp_path / "server.properties"
    config.write_text(AUTHORIZER + "super.users=User:admin\nallow.everyone.if.no.acl.found=false\n")
    threads = [GatewayThread(tansu.bootstrap, {"PLAINTEXT": "127.0.0.1:0"}, url, config_path=config,
                             event_log=tmp_path / f"events-{i}") for i in range(2)]
    for t in threads:
        t.start()
    try:
        yield threads[0], threads[1]
    finally:
        for t in threads:
            t.stop()


def test_two_gateways_share_acls_through_a_kafka_store(kafka_store_gateways: tuple[GatewayThread, GatewayThread]
                                                      ) -> None:
    a, b = kafka_store_gateways
    topic = f"shared-{uuid.uuid4().hex[:6]}"
    admin = _kp_admin(a.bootstrap(), "admin")
    try:
        assert not admin.create_acls([_read_acl(topic)])["failed"]
    finally:
        admin.close()

    def b_allows() -> bool:
        return bool(b.gateway.authorizer.authorize("User:bob", "127.0.0.1", qacl.AclOperation.READ,
                                                   qacl.ResourceType.TOPIC, topic))

    start = time.monotonic()
    assert _wait(b_allows), "gateway B never saw the ACL created through gateway A"
    took = time.monotonic() - start
    admin_b = _kp_admin(b.bootstrap(), "admin")
    try:
        acls, _error = admin_b.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                       ResourcePatternFilter(ResourceType.TOPIC, topic,
                                                                             ACLResourcePatternType.LITERAL)))
        assert [a_.principal for a_ in acls] == ["User:bob"]
        admin_b.delete_acls([ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                       ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))])
    finally:
        admin_b.close()
    assert _wait(lambda: not a.gateway.authorizer.authorize("User:bob", "127.0.0.1", qacl.AclOperation.READ,
                                                           qacl.ResourceType.TOPIC, topic))
    print(f"ACL propagated between gateways in {took:.2f} s")


def test_store_copy_carries_acls_to_a_kafka_store_and_back(tansu: Tansu, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from quotaflow.cli.main import cli

    src, back = tmp_path / "src.db", tmp_path / "back.db"
    url = f"kafka://{tansu.bootstrap}/copy-{uuid.uuid4().hex[:8]}"
    runner = CliRunner()
    added = runner.invoke(cli, ["acls", "--store", str(src), "--add", "--allow-principal", "User:app", "--producer",
                                "--topic", "orders-", "--resource-pattern-type", "prefixed"])
    assert added.exit_code == 0, added.output
    there = runner.invoke(cli, ["store", "copy", str(src), url])
    assert there.exit_code == 0 and "3 ACLs" in there.output, there.output
    listed = runner.invoke(cli, ["acls", "--store", url, "--list"])
    assert listed.output.count("principal=User:app") == 3, listed.output
    again = runner.invoke(cli, ["store", "copy", url, str(back)])
    assert again.exit_code == 0, again.output
    with open_store(src) as a, open_store(back) as b:
        assert a.acls().bindings == b.acls().bindings and len(a.acls().bindings) == 3


def test_quotaflow_acls_through_the_gateway(authz_gateway: RunningGateway, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from quotaflow.cli.main import cli

    def client_config(user: str) -> str:
        path = tmp_path / f"{user}.properties"
        path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka."
                        f'common.security.plain.PlainLoginModule required username="{user}" '
                        f'password="{USERS[user]}";\n')
        return str(path)

    def acls(user: str, *args: str) -> Any:
        return CliRunner().invoke(cli, ["acls", "--bootstrap-server", authz_gateway.bootstrap, "--command-config",
                                        client_config(user), *args])

    added = acls("admin", "--add", "--consumer", "--allow-principal", "User:bob", "--topic", "events",
                 "--group", "readers")
    assert added.exit_code == 0, added.output
    listed = acls("admin", "--list", "--principal", "User:bob")
    assert listed.exit_code == 0 and listed.output.count("principal=User:bob") == 3, listed.output
    decided = acls("admin", "--authorize", "--principal", "User:bob", "--operation", "Describe", "--topic", "events")
    assert "ALLOWED by ResourcePattern(resourceType=TOPIC, name=events" in decided.output, decided.output
    refused = acls("bob", "--add", "--allow-principal", "User:bob", "--topic", "anything")
    assert refused.exit_code == 1
    assert "org.apache.kafka.common.errors.ClusterAuthorizationException" in refused.output, refused.output
    removed = acls("admin", "--remove", "--topic", "events", "--force")
    assert removed.exit_code == 0, removed.output
    assert acls("admin", "--list").output.count("principal=User:bob") == 1  # the group's READ is left


# -- hostile input: the ACL APIs fuzzed against a gateway with an authorizer ----------------------------------------

_codes = st.integers(-1, 9)
_text = st.text(max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(creations=st.lists(st.tuples(_codes, _text, _codes, st.one_of(_text, st.just("User:x")), _text, _codes,
                                    _codes), max_size=6),
       garbage=st.binary(max_size=80), version=st.integers(1, 3))
@example(creations=[(2, "t", 3, "User:x", "*", 3, 3), (4, "c", 3, "User:x", "*", 7, 3)], garbage=b"",
         version=3)  # one stored, one refused with INVALID_REQUEST
@example(creations=[(2, "u", 3, "User:x", "*", 3, 3), (1, "u", 3, "User:x", "*", 3, 3)], garbage=b"",
         version=2)  # ANY fails the whole request: nothing stored
def test_fuzzed_acl_requests_leave_only_valid_acls_and_a_serving_gateway(
        authz_gateway: RunningGateway, creations: list[tuple[int, str, int, str, str, int, int]], garbage: bytes,
        version: int) -> None:
    from kafka.protocol.admin import CreateAclsRequest

    from quotaflow.admin.wire import KafkaWireConnection, SaslPlain
    from quotaflow.core.acl import binding_problem
    from quotaflow.core.errors import BrokerConnectionError

    host, port = authz_gateway.address
    request = CreateAclsRequest[version](creations=[CreateAclsRequest.AclCreation(
        resource_type=rt, resource_name=name, resource_pattern_type=pt, principal=principal, host=h,
        operation=op, permission_type=perm) for rt, name, pt, principal, h, op, perm in creations])
    # as a super user: valid bindings are stored, invalid ones refused with Kafka's errors, an undefined code
    # closes the connection (as Kafka's request parser does)
    conn = KafkaWireConnection(host, port, sasl=SaslPlain("admin", USERS["admin"]), timeout=10)
    try:
        with contextlib.suppress(BrokerConnectionError):
            response = conn.send(request)
            assert len(response.results) == len(creations)
    finally:
        conn.close()
    with socket.create_connection((host, port), timeout=5) as raw:  # and a body that is not CreateAcls at all
        raw.sendall(struct.pack(">i", 10 + len(garbage)) + struct.pack(">hhih", 30, version, 99, 0) + garbage)
    stored = authz_gateway.thread.gateway.acl_store.acls().bindings
    assert all(binding_problem(b) is None for b in stored)
    assert authz_gateway.thread.gateway.authorizer.index.bindings == stored  # the running authorizer has them
    admin = _kp_admin(authz_gateway.bootstrap, "admin")  # the gateway still serves
    try:
        assert not admin.create_acls([_read_acl("witness")])["failed"]
    finally:
        admin.close()


def test_an_acl_added_with_the_cli_reaches_every_gateway_on_a_sqlite_store(gateway_factory: GatewayFactory,
                                                                           tmp_path: Path) -> None:
    from click.testing import CliRunner

    from quotaflow.cli.main import cli

    config = tmp_path / "server.properties"
    config.write_text(AUTHORIZER)
    store = tmp_path / "fleet.db"
    gateways = [gateway_factory(store=store, config_path=config) for _ in range(2)]
    added = CliRunner().invoke(cli, ["acls", "--store", str(store), "--add", "--allow-principal", "User:bob",
                                     "--operation", "Read", "--topic", "fleet"])
    assert added.exit_code == 0, added.output
    start = time.monotonic()
    for gw in gateways:
        assert _wait(lambda gw=gw: gw.thread.gateway.authorizer.authorize(
            "User:bob", "127.0.0.1", qacl.AclOperation.READ, qacl.ResourceType.TOPIC, "fleet"))
    print(f"both gateways enforced the CLI's ACL after {time.monotonic() - start:.2f} s")


def test_a_revoke_through_another_gateway_refuses_the_next_fetch_of_a_cached_allow(
        gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """Gateway A has bob's READ decision cached (he fetched through it); admin revokes the ACL through gateway B's
    DeleteAcls; A's store refresh loads the change (a new ``Authorizer.generation``) and bob's next fetch through A
    is refused; granted again with the CLI, the cached refusal does not outlive the change either."""
    from click.testing import CliRunner
    from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
    from kafka.protocol.consumer import FetchRequest, FetchResponse

    from quotaflow.cli.main import cli

    from .test_e2e_hostile_tenant import _fetch_topic, _wire_as

    config = tmp_path / "server.properties"
    config.write_text(AUTHORIZER + "super.users=User:admin\n")
    store = tmp_path / "fleet.db"
    with open_store(store) as qs:
        for user in ("admin", "bob"):  # _wire_as logs in with <user>-secret
            qs.put_credential(hash_password(user, f"{user}-secret", iterations=1000))
    sasl = {"SASL_PLAINTEXT": "127.0.0.1:0"}
    a, b = (gateway_factory(store=store, config_path=config, listeners=sasl) for _ in range(2))
    topic = f"cached-{uuid.uuid4().hex[:6]}"
    with _wire_as(a.thread, "admin") as wire:
        t = CreateTopicsRequest.CreatableTopic
        wire.send(CreateTopicsRequest[5](topics=[t(name=topic, num_partitions=1, replication_factor=1,
                                                   assignments=[], configs=[])], timeout_ms=10_000,
                                         validate_only=False), 5)
        assert [r.error_code for r in CreateTopicsResponse.decode(wire.recv(), version=5, header=True).topics] == [0]

    def fetch_error() -> int:
        with _wire_as(a.thread, "bob") as wire:
            wire.send(FetchRequest[11](replica_id=-1, max_wait_ms=10, min_bytes=0, max_bytes=1 << 20,
                                       isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
                                       forgotten_topics_data=[], topics=[_fetch_topic(topic)]), 11)
            answer = FetchResponse.decode(wire.recv(), version=11, header=True)
            return int(answer.responses[0].partitions[0].error_code)

    def acls(*args: str) -> None:
        result = CliRunner().invoke(cli, ["acls", "--store", str(store), *args, "--allow-principal", "User:bob",
                                          "--operation", "Read", "--topic", topic, "--force"])
        assert result.exit_code == 0, result.output

    acls("--add")
    assert _wait(lambda: fetch_error() == 0)
    assert fetch_error() == 0  # decided from A's cache now
    generation = a.thread.gateway.access.authorizer.generation
    admin = _kp_admin(b.thread.bootstrap(), "admin")
    try:
        [(_f, deleted, err)] = admin.delete_acls([ACLFilter(
            "User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL))])
        assert (err is None or err.errno == 0) and len(deleted) == 1
    finally:
        admin.close()
    assert _wait(lambda: fetch_error() == 29), "A kept its cached allow after B revoked the ACL"
    assert a.thread.gateway.access.authorizer.generation != generation
    acls("--add")
    assert _wait(lambda: fetch_error() == 0), "A kept its cached refusal after the CLI granted the ACL again"
