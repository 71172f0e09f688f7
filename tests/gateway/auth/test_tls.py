"""TLS settings under Kafka's names (PEM keystores and truststores) and ssl.principal.mapping.rules."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from quotaflow.core.errors import CommandError
from quotaflow.gateway.auth.ssl_principal import SslPrincipalMapper, SslPrincipalMappingError, distinguished_name
from quotaflow.gateway.auth.tls import listener_tls, pem_text, upstream_tls

KAFKA_DOC_RULES = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, "
                   "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, "
                   "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, "
                   "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT")


@pytest.mark.parametrize(("dn", "principal"), [
    ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
    ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
    ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),
    ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
])
def test_the_kafka_documentation_rules(dn: str, principal: str) -> None:
    assert SslPrincipalMapper.from_rules(KAFKA_DOC_RULES).name(dn) == principal


def test_rules_with_commas_escapes_and_no_match() -> None:
    mapper = SslPrincipalMapper.from_rules(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"
    assert SslPrincipalMapper.from_rules(r"RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/").name("CN=bob,O=x") == "bob"
    assert SslPrincipalMapper.from_rules(r"RULE:^CN=(.*)$/user\/$1$9/").name("CN=a") == "user/a$9"
    assert SslPrincipalMapper.from_rules(None).name("CN=a,O=b") == "CN=a,O=b"  # unset: DEFAULT
    strict = SslPrincipalMapper.from_rules("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/")
    with pytest.raises(SslPrincipalMappingError, match="No rules apply to CN=x,OU=other"):
        strict.name("CN=x,OU=other")


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U", "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:CN=(.*?),OU=ServiceUsers.*/$1/", "RULE:CN=(.*?),OU=ServiceUsers.*/$1/L/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/L", "RULE:CN=(.*?),OU=ServiceUsers.*/U", "RULE:CN=(.*?),OU=ServiceUsers.*/LU",
])
def test_invalid_rules_are_refused(rules: str) -> None:
    with pytest.raises(CommandError, match="Invalid rule"):
        SslPrincipalMapper.from_rules(rules)


def test_distinguished_name_is_rfc2253_most_specific_first() -> None:
    subject = ((("countryName", "US"),), (("organizationName", "Acme, Inc."),),
               (("organizationalUnitName", "eng"), ("userId", "7")), (("commonName", " alice"),))
    assert distinguished_name(subject) == r"CN=\ alice,OU=eng+UID=7,O=Acme\, Inc.,C=US"
    assert distinguished_name(((("emailAddress", "a@b"),),)) == "1.2.840.113549.1.9.1=#1603614062"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    (tmp / "ca.pem").write_bytes(ca.cert_pem.bytes())
    (tmp / "server.pem").write_bytes(server.private_key_and_cert_chain_pem.bytes())
    (tmp / "key.pem").write_bytes(server.private_key_pem.bytes())
    (tmp / "chain.pem").write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), password=None)
    (tmp / "encrypted.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret")) + (tmp / "chain.pem").read_bytes())
    return {p.stem: p for p in tmp.iterdir()}


def test_listener_keystore_forms_and_overrides(pki: dict[str, Path]) -> None:
    by_file = listener_tls({"ssl.keystore.location": str(pki["server"])}, "SSL")
    assert by_file.context.verify_mode == ssl.CERT_NONE  # ssl.client.auth=none by default, as Kafka
    one_line = {  # PEM text, as a properties file's continuation lines leave it: no line breaks
        "ssl.keystore.key": pki["key"].read_text().replace("\n", ""),
        "ssl.keystore.certificate.chain": pki["chain"].read_text().replace("\n", " "),
    }
    assert listener_tls(one_line, "SSL").context is not None
    encrypted = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["encrypted"])}
    with pytest.raises(CommandError, match="cannot load the keystore"):
        listener_tls(encrypted, "SSL")
    assert listener_tls({**encrypted, "ssl.key.password": "s3cret"}, "SSL")
    per_listener = {"ssl.keystore.location": "/nonexistent.pem",
                    "listener.name.external.ssl.keystore.location": str(pki["server"]),
                    "listener.name.external.ssl.client.auth": "required",
                    "listener.name.external.ssl.truststore.location": str(pki["ca"]),
                    "listener.name.external.ssl.principal.mapping.rules": "RULE:^CN=(.*)$/$1/"}
    external = listener_tls(per_listener, "EXTERNAL")
    assert external.context.verify_mode == ssl.CERT_REQUIRED
    assert external.principal({"subject": ((("commonName", "bob"),),)}) == "bob"
    assert external.principal(None) == "ANONYMOUS"
    with pytest.raises(CommandError, match=r"cannot load the keystore /nonexistent\.pem"):
        listener_tls(per_listener, "INTERNAL")  # the unprefixed setting is INTERNAL's


@pytest.mark.parametrize(("props", "message"), [
    ({}, "has no keystore"),
    ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "x.jks"}, "JKS is not supported"),
    ({"ssl.keystore.key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"}, "go together"),
    ({"ssl.keystore.key": "not pem", "ssl.keystore.certificate.chain": "x"}, "expected PEM text"),
    ({"ssl.client.auth": "always"}, "ssl.client.auth"),
    ({"ssl.enabled.protocols": "TLSv1"}, "ssl.enabled.protocols"),
    ({"ssl.principal.mapping.rules": "DEFAULT/L"}, "Invalid rule"),
])
def test_bad_listener_settings_are_named(pki: dict[str, Path], props: dict[str, str], message: str) -> None:
    base = {} if "ssl.keystore.location" in props or "ssl.keystore.key" in props or not props else \
        {"ssl.keystore.location": str(pki["server"])}
    with pytest.raises(CommandError, match=message):
        listener_tls({**base, **props}, "SSL")


def test_upstream_settings(pki: dict[str, Path]) -> None:
    assert upstream_tls({}) is None
    assert upstream_tls({"quotaflow.upstream.security.protocol": "PLAINTEXT"}) is None
    context = upstream_tls({"quotaflow.upstream.security.protocol": "SSL",
                            "quotaflow.upstream.ssl.truststore.location": str(pki["ca"])})
    assert context is not None and context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    relaxed = upstream_tls({"quotaflow.upstream.security.protocol": "SSL",
                            "quotaflow.upstream.ssl.truststore.certificates": pki["ca"].read_text(),
                            "quotaflow.upstream.ssl.endpoint.identification.algorithm": ""})
    assert relaxed is not None and not relaxed.check_hostname
    assert upstream_tls({"quotaflow.upstream.security.protocol": "SASL_PLAINTEXT"}) is None
    assert upstream_tls({"quotaflow.upstream.security.protocol": "SASL_SSL"}) is not None  # TLS, SASL passed through
    with pytest.raises(CommandError, match="Invalid value GSSAPI"):
        upstream_tls({"quotaflow.upstream.security.protocol": "GSSAPI"})


def test_pem_text_rewraps_blocks() -> None:
    body = "A" * 100
    out = pem_text(f"-----BEGIN CERTIFICATE----- {body} -----END CERTIFICATE-----")
    assert out == f"-----BEGIN CERTIFICATE-----\n{'A' * 64}\n{'A' * 36}\n-----END CERTIFICATE-----\n"


def test_records_go_through_the_tls_connections_c_methods(pki: dict[str, Path]) -> None:
    """Both contexts make ``DirectSSLObject``s: uvloop's TLS transport reads and writes every record through the C
    methods of the wrapped connection, not through ``ssl.SSLObject``'s Python forwarders. 1 MiB both ways through a
    real TLS connection on 127.0.0.1 (records of every size, reads into uvloop's buffer and not) arrives intact."""
    import asyncio
    import types

    import uvloop

    server_context = listener_tls({"ssl.keystore.location": str(pki["server"])}, "SSL").context
    client_context = upstream_tls({"quotaflow.upstream.security.protocol": "SSL",
                                   "quotaflow.upstream.ssl.truststore.location": str(pki["ca"])})
    assert client_context is not None
    payload = bytes(range(256)) * 4096

    async def run() -> tuple[bytes, list[object]]:
        objects: list[object] = []

        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            objects.append(writer.get_extra_info("ssl_object"))
            writer.write(await reader.readexactly(len(payload)))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_context)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context,
                                                       server_hostname="127.0.0.1")
        objects.append(writer.get_extra_info("ssl_object"))
        for i in range(0, len(payload), 70_001):  # uneven writes: records of several sizes
            writer.write(payload[i:i + 70_001])
        echoed = await reader.readexactly(len(payload))
        writer.close()
        server.close()
        await server.wait_closed()
        return echoed, objects

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        echoed, objects = runner.run(run())
    assert echoed == payload
    assert len(objects) == 2
    for obj in objects:
        assert type(obj).__name__ == "DirectSSLObject"
        for name in ("read", "write", "pending"):
            assert isinstance(getattr(obj, name), types.BuiltinMethodType), name
