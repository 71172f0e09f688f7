"""Principals over their connection creation rate (issue 20 item 3) where the gateway does not check the password
itself: a TLS client-certificate principal (checked at the handshake; real TLS, certificates made by trustme) and a
SASL passthrough principal (checked when the broker accepts the login). Over the rate the connection is held for the
throttle and closed without an answer; another principal on the same address is not held. (Terminate-mode SASL:
tests/gateway/test_e2e_model.py.)"""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import pytest

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import QuotaEntity
from quotaflow.store import open_store

from .conftest import GatewayFactory
from .test_e2e_tls import RULES, _api_versions_over_tls, pki  # noqa: F401 (pki is a fixture)

pytestmark = pytest.mark.broker


def test_a_certificate_principal_over_its_connection_rate_is_held_then_closed(
    gateway_factory: GatewayFactory, pki: dict[str, str], tmp_path: Path  # noqa: F811
) -> None:
    props = {"quota.window.num": "2", "listener.security.protocol.map": "SSL:SSL,PLAINTEXT:PLAINTEXT",
             "listener.name.ssl.ssl.keystore.location": pki["server"],
             "listener.name.ssl.ssl.truststore.location": pki["ca"],
             "listener.name.ssl.ssl.client.auth": "required",
             "listener.name.ssl.ssl.principal.mapping.rules": RULES}
    config = tmp_path / "gateway.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    gw = gateway_factory(config_path=config, listeners={"SSL": "127.0.0.1:0", "PLAINTEXT": "127.0.0.1:0"})
    admin = Admin(open_store(gw.store_path))
    try:
        assert admin.alter([Alteration.of(QuotaEntity(user="alice@eng"), {"connection_creation_rate": 2.0})])[0].ok
    finally:
        admin.close()
    time.sleep(1.0)  # the connection quotas poll the store
    host, port = gw.thread.address("SSL")
    context = ssl.create_default_context(cafile=pki["ca"])
    context.load_cert_chain(pki["alice_cert"], pki["alice_key"])
    answered = [_api_versions_over_tls(context, host, port) for _ in range(10)]
    ok = answered.count(0)
    print(f"10 TLS connections as alice@eng (2/s): {ok} answered")
    assert 2 <= ok < 10  # the first ones within the rate, then held and closed



def test_a_passthrough_principal_over_its_connection_rate_is_held_then_closed(gateway_factory: GatewayFactory,
                                                                             tmp_path: Path) -> None:
    """SASL passthrough: the broker (here a second gateway terminating SASL/PLAIN) accepts alice's login; the front
    gateway, whose store gives alice 2 connections/s, holds the answer back and closes the connection once she is
    over it; bob, on the same address and with no rate, is never held."""
    from quotaflow.admin.wire import KafkaWireConnection, SaslPlain
    from quotaflow.core.errors import QuotaflowError
    from quotaflow.gateway.config import GatewayConfig
    from quotaflow.store.credentials import hash_password

    sasl = {"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT"}
    cluster = gateway_factory(config=GatewayConfig.from_properties(sasl), listeners={"SASL_PLAINTEXT": "127.0.0.1:0"})
    with open_store(cluster.store_path) as store:
        for user in ("alice", "bob"):
            store.put_credential(hash_password(user, f"{user}-secret", iterations=1000))
    config = tmp_path / "front.properties"
    config.write_text("quota.window.num=2\nlistener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT\n"
                      "quotaflow.upstream.security.protocol=SASL_PLAINTEXT\n")
    front = gateway_factory(cluster.bootstrap, listeners={"SASL_PLAINTEXT": "127.0.0.1:0"}, config_path=config)
    admin = Admin(open_store(front.store_path))
    try:
        assert admin.alter([Alteration.of(QuotaEntity(user="alice"), {"connection_creation_rate": 2.0})])[0].ok
    finally:
        admin.close()
    time.sleep(1.0)

    def logins(user: str) -> int:
        ok = 0
        for _ in range(10):
            try:
                KafkaWireConnection(*front.address, sasl=SaslPlain(user, f"{user}-secret"), timeout=10).close()
                ok += 1
            except (QuotaflowError, OSError):
                pass
        return ok

    alice, bob = logins("alice"), logins("bob")
    print(f"10 passthrough logins each: alice (2/s) {alice}, bob {bob}")
    assert bob == 10 and 2 <= alice < 10
