"""SASL/PLAIN at the gateway and the quota admin APIs (48/49) over the wire, against a real tansu."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from quotaflow.admin import Admin
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.errors import CommandError
from quotaflow.core.filters import QuotaFilter
from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.data.quota_admin import principal_allowed
from quotaflow.gateway.server import GatewayThread
from quotaflow.store import open_store
from quotaflow.testing.tansu import Tansu

try:  # tests/gateway is a package when its __init__.py is present, else a rootdir on sys.path
    from ..gateway_wire import Wire
except ImportError:
    from gateway_wire import Wire  # type: ignore[no-redef]

pytestmark = pytest.mark.broker


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "q.db"
    with open_store(path) as store:
        store.put_credential(hash_password("admin", "admin-secret", iterations=1000))
        store.put_credential(hash_password("bob", "bob-secret", iterations=1000))
    return path


@pytest.fixture
def gateway(tansu: Tansu, store_path: Path) -> Iterator[GatewayThread]:
    listeners = {"PLAINTEXT": "127.0.0.1:0", "SASL_PLAINTEXT": "127.0.0.1:0"}
    with GatewayThread(tansu.bootstrap, listeners, store_path, admin_principals=frozenset({"User:admin"})) as gw:
        yield gw


def _login(wire: Wire, user: str, password: str, version: int = 1) -> SaslAuthenticateResponse:
    wire.send(SaslHandshakeRequest[version](mechanism="PLAIN"), version)
    hs = SaslHandshakeResponse.decode(wire.recv(), version=version, header=True)
    assert hs.error_code == 0 and hs.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    wire.send(SaslAuthenticateRequest[2](auth_bytes=f"\0{user}\0{password}".encode()), 2)
    return SaslAuthenticateResponse.decode(wire.recv(), version=2, header=True)


def _alter(wire: Wire, user: str, key: str, value: float, version: int = 1) -> AlterClientQuotasResponse:
    e = AlterClientQuotasRequest.EntryData
    wire.send(AlterClientQuotasRequest[version](validate_only=False, entries=[e(
        entity=[e.EntityData(entity_type="user", entity_name=user)],
        ops=[e.OpData(key=key, value=value, remove=False)])]), version)
    return AlterClientQuotasResponse.decode(wire.recv(), version=version, header=True)


def _describe(wire: Wire, version: int = 1) -> DescribeClientQuotasResponse:
    c = DescribeClientQuotasRequest.ComponentData
    wire.send(DescribeClientQuotasRequest[version](components=[c(entity_type="user", match_type=2, match=None)],
                                                   strict=False), version)
    return DescribeClientQuotasResponse.decode(wire.recv(), version=version, header=True)


@pytest.mark.parametrize("version", [0, 1])
def test_admin_alters_and_describes_what_the_store_holds(gateway: GatewayThread, store_path: Path,
                                                         version: int) -> None:
    wire = Wire(gateway.address("SASL_PLAINTEXT"))
    assert _login(wire, "admin", "admin-secret").error_code == 0
    altered = _alter(wire, "alice", "producer_byte_rate", 4096.0, version)
    assert [(r.error_code, r.error_message) for r in altered.entries] == [(0, None)]
    bad = _alter(wire, "alice", "producer_byte_rate", 1.5, version)
    assert (bad.entries[0].error_code, bad.entries[0].error_message) == (
        42, "producer_byte_rate cannot be a fractional value.")
    described = _describe(wire, version)
    assert described.error_code == 0
    wire_view = {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
                 for entry in described.entries}
    with open_store(store_path) as store:
        stored = {tuple(d.entity.to_wire().items()): d.values
                  for d in Admin(store).describe(QuotaFilter.contains([]))}
    assert wire_view == stored == {(("user", "alice"),): {"producer_byte_rate": 4096.0}}


def test_unauthorised_principals_are_refused(gateway: GatewayThread, store_path: Path) -> None:
    anonymous = Wire(gateway.address("PLAINTEXT"))
    described = _describe(anonymous)
    assert (described.error_code, described.error_message, described.entries) == (
        31, None, None)  # DescribeClientQuotasRequest.getErrorResponse: ApiError's null message, null entries
    bob = Wire(gateway.address("SASL_PLAINTEXT"))
    assert _login(bob, "bob", "bob-secret").error_code == 0
    altered = _alter(bob, "bob", "producer_byte_rate", 1e9)
    assert [(r.error_code, r.error_message) for r in altered.entries] == [(31, "Cluster authorization failed.")]
    assert [(e.entity_type, e.entity_name) for e in altered.entries[0].entity] == [("user", "bob")]
    with open_store(store_path) as store:
        assert store.get(QuotaEntity(user="bob")) == {}


def test_bad_password_fails_and_closes(gateway: GatewayThread) -> None:
    wire = Wire(gateway.address("SASL_PLAINTEXT"))
    response = _login(wire, "admin", "wrong")
    assert response.error_code == 58
    assert response.error_message == "Authentication failed: Invalid username or password"
    assert wire.closed()


def test_handshake_v0_raw_token_then_kafka_requests(gateway: GatewayThread) -> None:
    wire = Wire(gateway.address("SASL_PLAINTEXT"))
    wire.send(SaslHandshakeRequest[0](mechanism="PLAIN"), 0)
    assert SaslHandshakeResponse.decode(wire.recv(), version=0, header=True).error_code == 0
    token = b"\0admin\0admin-secret"
    wire.sock.sendall(struct.pack(">i", len(token)) + token)
    assert wire.recv() == b""  # PLAIN's (empty) server token
    assert _describe(wire).error_code == 0  # authenticated as admin
    wire.send(ApiVersionsRequest[0](), 0)
    assert ApiVersionsResponse.decode(wire.recv(), version=0, header=True).error_code == 0


def test_unsupported_mechanism(gateway: GatewayThread) -> None:
    wire = Wire(gateway.address("SASL_PLAINTEXT"))
    wire.send(SaslHandshakeRequest[1](mechanism="GSSAPI"), 1)
    response = SaslHandshakeResponse.decode(wire.recv(), version=1, header=True)
    assert (response.error_code, response.mechanisms) == (33, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])


def test_principal_allowed() -> None:
    assert principal_allowed(None, "ANONYMOUS")
    assert principal_allowed(frozenset({"User:admin"}), "admin")
    assert principal_allowed(frozenset({"admin"}), "admin")
    assert not principal_allowed(frozenset({"User:admin"}), "ANONYMOUS")


def test_sasl_listener_refuses_requests_before_authentication(gateway: GatewayThread) -> None:
    early = Wire(gateway.address("SASL_PLAINTEXT"))
    early.send(ApiVersionsRequest[0](), 0)  # allowed before authentication, as on Kafka
    assert ApiVersionsResponse.decode(early.recv(), version=0, header=True).error_code == 0
    early.send(MetadataRequest[1](topics=None), 1)
    assert early.closed()
    late = Wire(gateway.address("SASL_PLAINTEXT"))
    assert _login(late, "bob", "bob-secret").error_code == 0
    late.send(MetadataRequest[1](topics=None), 1)
    assert MetadataResponse.decode(late.recv(), version=1, header=True).brokers


def test_security_protocol_map() -> None:
    config = GatewayConfig.from_properties({"listener.security.protocol.map": "EXTERNAL:SASL_PLAINTEXT,INT:PLAINTEXT"})
    assert config.security_protocol("EXTERNAL") == "SASL_PLAINTEXT"
    assert config.security_protocol("INT") == "PLAINTEXT"
    assert config.security_protocol("SASL_PLAINTEXT") == "SASL_PLAINTEXT"
    assert config.security_protocol("OTHER") == "PLAINTEXT"
    tls = GatewayConfig.from_properties({"listener.security.protocol.map": "EXTERNAL:SSL,INT:SASL_SSL"})
    assert tls.security_protocol("EXTERNAL") == "SSL" and tls.security_protocol("INT") == "SASL_SSL"
    with pytest.raises(CommandError):
        GatewayConfig.from_properties({"listener.security.protocol.map": "EXTERNAL:GSSAPI"})


def test_a_refused_alteration_echoes_every_entry_as_sent() -> None:
    """AlterClientQuotasRequest.getErrorResponse: one result per request entry (a repeated entity included), its
    entity in the order sent, CLUSTER_AUTHORIZATION_FAILED with Errors.message()'s text; the store untouched."""
    from quotaflow.gateway.data.quota_admin import QuotaAdminHandler
    from quotaflow.gateway.wire import protocol

    cls = protocol.REQUESTS[49][1]
    entry = cls._struct.fields["entries"].data_class
    entity, op = entry._struct.fields["entity"].data_class, entry._struct.fields["ops"].data_class

    def one(*pairs: tuple[str, str | None]) -> Any:
        return entry(entity=[entity(entity_type=t, entity_name=n) for t, n in pairs],
                     ops=[op(key="producer_byte_rate", value=1.0, remove=False)])

    request = cls(entries=[one(("user", "u"), ("client-id", "c")), one(("client-id", "c"), ("user", "u")),
                           one(("user", None))], validate_only=False)

    class NoAdmin:
        def alter(self, *_a: Any, **_k: Any) -> Any:
            raise AssertionError("a refused alteration reached the store")

    answer = QuotaAdminHandler(NoAdmin(), None).alter(1, request, allowed=False)  # type: ignore[arg-type]
    assert [(r.error_code, r.error_message, [(e.entity_type, e.entity_name) for e in r.entity])
            for r in answer.entries] == [
        (31, "Cluster authorization failed.", [("user", "u"), ("client-id", "c")]),
        (31, "Cluster authorization failed.", [("client-id", "c"), ("user", "u")]),
        (31, "Cluster authorization failed.", [("user", None)])]
