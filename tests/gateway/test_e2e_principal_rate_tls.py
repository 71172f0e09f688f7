"""A TLS client-certificate principal over its connection creation rate (issue 20 item 3): the certificate
authenticated it, so it is checked at the handshake, held for the throttle and closed; a PLAINTEXT client on the same
address is not (real TLS, certificates made by trustme)."""

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

