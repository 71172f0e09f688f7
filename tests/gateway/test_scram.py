"""SCRAM at the gateway: RFC 7677's exchange byte for byte, stored keys only, refusals that reveal nothing."""

from __future__ import annotations

import base64

import pytest

from quotaflow.core.errors import CommandError
from quotaflow.gateway.sasl import SaslAuthenticationError
from quotaflow.gateway.scram import ScramServer
from quotaflow.store.base import ScramCredential
from quotaflow.store.scram import scram_credential

# RFC 7677 section 3: user "user", password "pencil", 4096 iterations
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _lookup(credentials: dict[str, ScramCredential]):  # type: ignore[no-untyped-def]
    return lambda user, mechanism: credentials.get(user)


def test_rfc7677_exchange() -> None:
    stored = scram_credential("user", "SCRAM-SHA-256", "pencil", iterations=4096, salt=SALT)
    server = ScramServer("SCRAM-SHA-256", _lookup({"user": stored}), nonce=lambda: SERVER_NONCE)
    assert server.first(CLIENT_FIRST) == SERVER_FIRST
    assert server.final(CLIENT_FINAL) == SERVER_FINAL
    assert server.done and server.user == "user"


def test_wrong_proof_and_unknown_user_fail_alike() -> None:
    stored = scram_credential("user", "SCRAM-SHA-256", "not-pencil", iterations=4096, salt=SALT)
    messages = []
    for credentials in ({"user": stored}, {}):
        server = ScramServer("SCRAM-SHA-256", _lookup(credentials), nonce=lambda: SERVER_NONCE)
        first = server.first(CLIENT_FIRST)
        assert first.startswith(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=")
        with pytest.raises(SaslAuthenticationError) as e:
            server.final(CLIENT_FINAL)
        messages.append(str(e.value))
    assert messages[0] == messages[1] == ("Authentication failed during authentication due to invalid credentials "
                                          "with SASL mechanism SCRAM-SHA-256")


def test_malformed_and_mismatched_messages() -> None:
    stored = scram_credential("user", "SCRAM-SHA-256", "pencil", iterations=4096, salt=SALT)
    server = ScramServer("SCRAM-SHA-256", _lookup({"user": stored}), nonce=lambda: SERVER_NONCE)
    with pytest.raises(SaslAuthenticationError):
        server.first(b"p=tls-unique,,n=user,r=x")  # channel binding is not offered
    with pytest.raises(SaslAuthenticationError, match="authorization id"):
        server.first(b"n,a=admin,n=user,r=x")
    server.first(CLIENT_FIRST)
    with pytest.raises(SaslAuthenticationError, match="nonce"):
        server.final(CLIENT_FINAL.replace(b"r=rOpr", b"r=XOpr"))
    with pytest.raises(CommandError, match="minimum 4096"):
        scram_credential("u", "SCRAM-SHA-512", "p", iterations=100)


def test_client_side_of_rfc7677() -> None:
    from quotaflow.gateway.scram import ScramClient

    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=lambda: "rOprNGfwEbeRWgbNEkqO")
    assert client.first() == CLIENT_FIRST
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)
    with pytest.raises(SaslAuthenticationError):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))
