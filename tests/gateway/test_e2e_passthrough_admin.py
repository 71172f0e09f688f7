"""The APIs a SASL-passthrough gateway answers itself, from its own store: who may use them (issue 34's trust model).

In passthrough the cluster authenticates and authorizes every forwarded request, so the gateway's authorizer is not
asked about those; but DescribeClientQuotas / AlterClientQuotas (KIP-546) are answered from the gateway's quota
store, which the cluster knows nothing of. A gateway configured with ``authorizer.class.name`` and ``super.users``
used to drop its authorizer in passthrough altogether, and with no ``--admin-principal`` list any tenant the cluster
had authenticated could raise its own quota (bob set his ``producer_byte_rate`` to 10^12). These APIs keep the
gateway's authorizer in every mode: ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster, 31 otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from quotaflow.core.entities import QuotaEntity
from quotaflow.testing.tansu import Tansu

from .authz_gateway import AUTHORIZER_CONFIG
from .gateway_wire import Wire
from .passthrough_stack import PassthroughStack, passthrough_stack

pytestmark = pytest.mark.broker

CLUSTER_AUTHORIZATION_FAILED = 31
AUTHORIZER = dict(line.split("=", 1) for line in AUTHORIZER_CONFIG.splitlines()
                  if line.startswith(("authorizer.", "super.")))


@pytest.fixture(scope="module")
def stack(tansu: Tansu, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PassthroughStack]:
    """Passthrough in front of the authorizing cluster (users admin and bob), the front gateway configured with
    Kafka's authorizer and ``super.users=User:admin`` (its store holds no ACL: bob may do nothing there)."""
    with passthrough_stack(tansu.bootstrap, tmp_path_factory.mktemp("pt-admin"), front_props=AUTHORIZER) as pt:
        yield pt


def _login(stack: PassthroughStack, user: str) -> Wire:
    """Authenticated by the cluster, through the gateway."""
    wire = stack.wire()
    wire.send(SaslHandshakeRequest[1](mechanism="PLAIN"), 1)
    assert SaslHandshakeResponse.decode(wire.recv(), version=1, header=True).error_code == 0
    wire.send(SaslAuthenticateRequest[1](auth_bytes=f"\0{user}\0{user}-secret".encode()), 1)
    assert SaslAuthenticateResponse.decode(wire.recv(), version=1, header=True).error_code == 0
    return wire


def _alter(wire: Wire, user: str, rate: float) -> Any:
    entry = AlterClientQuotasRequest.EntryData
    wire.send(AlterClientQuotasRequest[1](entries=[entry(
        entity=[entry.EntityData(entity_type="user", entity_name=user)],
        ops=[entry.OpData(key="producer_byte_rate", value=rate, remove=False)])], validate_only=False), 1)
    return AlterClientQuotasResponse.decode(wire.recv(), version=1, header=True)


def _describe(wire: Wire) -> Any:
    wire.send(DescribeClientQuotasRequest[1](components=[], strict=False), 1)
    return DescribeClientQuotasResponse.decode(wire.recv(), version=1, header=True)


def _stored_rate(stack: PassthroughStack, user: str) -> float | None:
    """``user``'s producer_byte_rate in the front gateway's quota store (None: none)."""
    assert stack.front.gateway is not None
    rate = stack.front.gateway.store.get(QuotaEntity(user=user)).get("producer_byte_rate")
    return None if rate is None else float(rate)


def test_a_tenant_cannot_alter_or_read_the_gateways_quotas(stack: PassthroughStack) -> None:
    wire = _login(stack, "bob")
    try:
        answer = _alter(wire, "bob", 1e12)
        assert [e.error_code for e in answer.entries] == [CLUSTER_AUTHORIZATION_FAILED], answer
        assert _describe(wire).error_code == CLUSTER_AUTHORIZATION_FAILED
    finally:
        wire.sock.close()
    assert _stored_rate(stack, "bob") is None


def test_the_super_user_may(stack: PassthroughStack) -> None:
    wire = _login(stack, "admin")
    try:
        assert [e.error_code for e in _alter(wire, "bob", 2048.0).entries] == [0]
        assert _describe(wire).error_code == 0
    finally:
        wire.sock.close()
    assert _stored_rate(stack, "bob") == 2048.0
