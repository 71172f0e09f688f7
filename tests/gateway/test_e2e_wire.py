"""The wire admin client (``quotaflow.admin.wire``) against a real gateway: what it reads is what the store holds."""

from __future__ import annotations

import time

import pytest

from quotaflow.admin import Admin, Alteration
from quotaflow.admin.codec import resolution_to_json
from quotaflow.admin.wire import (
    KafkaWireConnection,
    SaslPlain,
    WireAdmin,
)
from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.errors import (
    ClusterAuthorizationFailedError,
    InvalidRequestError,
    SaslAuthenticationFailedError,
    UnsupportedVersionError,
)
from quotaflow.core.filters import FilterComponent, QuotaFilter
from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.store import open_store
from quotaflow.testing.tansu import Tansu

from .conftest import GatewayFactory, RunningGateway

pytestmark = pytest.mark.broker

ALTERATIONS = [
    Alteration.of(QuotaEntity(user="alice"), {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}),
    Alteration.of(QuotaEntity(user="alice", client_id="app"), {"request_percentage": 50.0}),
    Alteration.of(QuotaEntity(user=DEFAULT), {"producer_byte_rate": 512.0}),
    Alteration.of(QuotaEntity(ip="127.0.0.9"), {"connection_creation_rate": 10.0}),
]


def store_admin(gw: RunningGateway) -> Admin:
    return Admin(open_store(gw.store_path))


def test_alter_then_describe_matches_the_store(gateway: RunningGateway) -> None:
    wire = WireAdmin(gateway.bootstrap)
    truth = store_admin(gateway)
    try:
        results = wire.alter(ALTERATIONS)
        assert [r.ok for r in results] == [True] * 4
        for f in (
            QuotaFilter(),
            QuotaFilter.contains([FilterComponent.exact("user", "alice")]),
            QuotaFilter.contains_only([FilterComponent.exact("user", "alice")]),
            QuotaFilter.contains([FilterComponent.default("user")]),
            QuotaFilter.contains([FilterComponent.any("ip")]),
        ):
            assert wire.describe(f) == truth.describe(f)
        assert len(truth.describe(QuotaFilter())) == 4
        # removal over the wire reaches the store too
        assert wire.alter([Alteration.of(QuotaEntity(user=DEFAULT), {"producer_byte_rate": None})])[0].ok
        assert QuotaEntity(user=DEFAULT) not in {d.entity for d in truth.describe(QuotaFilter())}
        # validate_only writes nothing
        assert wire.alter([Alteration.of(QuotaEntity(user="bob"), {"producer_byte_rate": 1.0})], True)[0].ok
        assert wire.describe(QuotaFilter.contains([FilterComponent.exact("user", "bob")])) == []
    finally:
        wire.close()
        truth.close()


def test_errors_map_to_quotaflow_types(gateway: RunningGateway) -> None:
    wire = WireAdmin(gateway.bootstrap)
    try:
        (bad,) = wire.alter([Alteration.of(QuotaEntity(user="alice"), {"producer_byte_rate": -1.0})])
        assert bad.error.code == InvalidRequestError.errno
        assert isinstance(bad.error.exception(), InvalidRequestError)
        with pytest.raises(InvalidRequestError):
            wire.describe(QuotaFilter.contains([FilterComponent("user", 0, None)]))  # EXACT with a null match
        with pytest.raises(UnsupportedVersionError):
            wire.describe(QuotaFilter.contains([FilterComponent("group", 2, None)]))  # unknown entity type
    finally:
        wire.close()


def test_sasl_principals_and_the_admin_list(gateway_factory: GatewayFactory) -> None:
    gw = gateway_factory(admin_principals=frozenset({"alice"}))
    qs = open_store(gw.store_path)
    qs.put_credential(hash_password("alice", "alice-secret", iterations=1000))
    qs.put_credential(hash_password("bob", "bob-secret", iterations=1000))
    qs.close()
    alice = WireAdmin(gw.bootstrap, sasl=SaslPlain("alice", "alice-secret"))
    bob = WireAdmin(gw.bootstrap, sasl=SaslPlain("bob", "bob-secret"))
    anonymous = WireAdmin(gw.bootstrap)
    try:
        assert alice.alter(ALTERATIONS[:1])[0].ok
        assert len(alice.describe(QuotaFilter())) == 1
        for refused in (bob, anonymous):
            with pytest.raises(ClusterAuthorizationFailedError):
                refused.describe(QuotaFilter())
            (result,) = refused.alter(ALTERATIONS[2:3])
            assert result.error.code == ClusterAuthorizationFailedError.errno
        assert len(alice.describe(QuotaFilter())) == 1  # the refused alter wrote nothing
    finally:
        for w in (alice, bob, anonymous):
            w.close()
    with pytest.raises(SaslAuthenticationFailedError):
        WireAdmin(gw.bootstrap, sasl=SaslPlain("alice", "wrong"))


def test_resolve_over_http_equals_the_store(gateway: RunningGateway) -> None:
    wire = WireAdmin(gateway.bootstrap, http_url=gateway.http_url)
    truth = store_admin(gateway)
    try:
        wire.alter(ALTERATIONS)
        for user, client in (("alice", "app"), ("alice", "other"), ("alice", ""), ("carol", "x")):
            got, want = wire.resolve(user, client), truth.resolve(user, client)
            assert got == want
            assert resolution_to_json(got) == resolution_to_json(want)
        assert wire.resolve("alice", "app").quotas["request_percentage"].value == 50.0
        assert wire.resolve_ip("127.0.0.9") == truth.resolve_ip("127.0.0.9")
    finally:
        wire.close()
        truth.close()


def test_throttle_time_is_honoured_before_the_next_request(gateway: RunningGateway) -> None:
    """A quota that throttles the admin client: the client sleeps the throttle time before sending again."""
    setup = WireAdmin(gateway.bootstrap)
    assert setup.alter([Alteration.of(QuotaEntity(user=DEFAULT), {"request_percentage": 0.01})])[0].ok
    setup.close()
    slept: list[float] = []
    host, port = gateway.address
    conn = KafkaWireConnection(host, port, sleep=slept.append)
    wire = WireAdmin.__new__(WireAdmin)
    wire.conn, wire.http_url, wire.timeout = conn, None, 5.0
    try:
        deadline = time.monotonic() + 5  # the quota reaches the gateway within a store poll
        while not conn.throttled_ms_total and time.monotonic() < deadline:
            wire.describe(QuotaFilter())
        assert conn.throttled_ms_total > 0, "a 0.01% request quota never throttled the admin client"
        wire.describe(QuotaFilter())
        assert slept and 0 < slept[-1] <= conn.throttled_ms_total / 1000
    finally:
        wire.close()


def test_a_broker_without_the_quota_apis_is_refused(tansu: Tansu) -> None:
    wire = WireAdmin(tansu.bootstrap)
    try:
        with pytest.raises(UnsupportedVersionError):
            wire.describe(QuotaFilter())
    finally:
        wire.close()
