"""SCRAM at the gateway: RFC 7677's exchange byte for byte, stored keys only, refusals that reveal nothing."""

from __future__ import annotations

import base64
import hashlib

import pytest

from quotaflow.core.errors import CommandError
from quotaflow.gateway.auth.sasl import SaslAuthenticationError
from quotaflow.gateway.auth.scram import ScramServer, unknown_user_credential
from quotaflow.gateway.config import SCRAM_LEGACY_CLIENT_NONCE, GatewayConfig
from quotaflow.store.base import ScramCredential
from quotaflow.store.scram import digest, hmac_digest, scram_credential

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
    from quotaflow.gateway.auth.scram import ScramClient

    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=lambda: "rOprNGfwEbeRWgbNEkqO")
    assert client.first() == CLIENT_FIRST
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)
    with pytest.raises(SaslAuthenticationError):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


def test_an_unknown_users_salt_is_stable_per_name_and_shaped_like_a_new_credentials() -> None:
    new = scram_credential("someone", "SCRAM-SHA-512", "p")
    fake = unknown_user_credential("SCRAM-SHA-512", "nobody")
    assert (len(fake.salt), fake.iterations) == (len(new.salt), new.iterations)
    assert unknown_user_credential("SCRAM-SHA-512", "nobody") == fake
    assert unknown_user_credential("SCRAM-SHA-512", "nobody2").salt != fake.salt
    assert unknown_user_credential("SCRAM-SHA-256", "nobody").salt != fake.salt
    # not a function of the name alone: the old SHA-256("quotaflow-unknown-user:" + name) is gone
    assert fake.salt not in hashlib.sha512(b"quotaflow-unknown-user:nobody").digest()


# librdkafka < 2.6.1: r = client nonce + (client nonce + server nonce); the proof recomputed over that message
LEGACY_FINAL_WITHOUT_PROOF = "c=biws,r=rOprNGfwEbeRWgbNEkqOrOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def _legacy_final() -> bytes:
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", SALT, 4096)
    client_key = hmac_digest("SCRAM-SHA-256", salted, b"Client Key")
    auth = b",".join([CLIENT_FIRST[3:], SERVER_FIRST, LEGACY_FINAL_WITHOUT_PROOF.encode()])
    signature = hmac_digest("SCRAM-SHA-256", digest("SCRAM-SHA-256", client_key), auth)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
    return LEGACY_FINAL_WITHOUT_PROOF.encode() + b",p=" + proof


@pytest.mark.parametrize("legacy", [False, True])
def test_a_repeated_client_nonce_passes_only_under_the_legacy_setting(legacy: bool) -> None:
    stored = scram_credential("user", "SCRAM-SHA-256", "pencil", iterations=4096, salt=SALT)
    server = ScramServer("SCRAM-SHA-256", _lookup({"user": stored}), nonce=lambda: SERVER_NONCE,
                         legacy_client_nonce=legacy)
    server.first(CLIENT_FIRST)
    if legacy:
        assert server.final(_legacy_final()).startswith(b"v=") and server.done
    else:
        with pytest.raises(SaslAuthenticationError, match="nonce"):
            server.final(_legacy_final())
    other = ScramServer("SCRAM-SHA-256", _lookup({"user": stored}), nonce=lambda: SERVER_NONCE,
                        legacy_client_nonce=legacy)
    other.first(CLIENT_FIRST)
    with pytest.raises(SaslAuthenticationError, match="nonce"):  # a nonce that does not end with the server's
        other.final(_legacy_final().replace(b"hNlF$k0,", b"hNlF$k1,"))


def test_the_legacy_setting_is_a_kafka_boolean() -> None:
    assert GatewayConfig.from_properties({SCRAM_LEGACY_CLIENT_NONCE: " TRUE"}).scram_legacy_client_nonce
    assert not GatewayConfig().scram_legacy_client_nonce
    with pytest.raises(CommandError, match="either true or false"):
        GatewayConfig.from_properties({SCRAM_LEGACY_CLIENT_NONCE: "yes"})


class _Store:
    """A credential lister over a dict: (user, mechanism) -> credential."""

    def __init__(self, credentials: list[ScramCredential]) -> None:
        self.credentials = {(c.user, c.mechanism): c for c in credentials}
        self.reads = 0

    def list_credentials(self) -> list[str]:
        self.reads += 1
        return sorted({user for user, _m in self.credentials})

    def get_scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.credentials.get((user, mechanism))


def _server_first(server: ScramServer, user: str) -> tuple[bytes, int]:
    first = server.first(f"n,,n={user},r=abc".encode())
    attrs = dict(part.split("=", 1) for part in first.decode().split(","))
    return base64.b64decode(attrs["s"]), int(attrs["i"])


def test_an_unknown_user_is_answered_with_the_stored_users_iterations_and_salt_length() -> None:
    """kafka-configs makes credentials with 4096 iterations; a fixed 8192 for unknown users told who exists."""
    from quotaflow.gateway.auth.scram import UnknownUsers

    stored = [scram_credential(u, "SCRAM-SHA-256", "pw", iterations=4096, salt=bytes(range(20)))
              for u in ("alice", "bob")] + [scram_credential("carol", "SCRAM-SHA-256", "pw", iterations=8192),
                                            scram_credential("alice", "SCRAM-SHA-512", "pw", iterations=5000)]
    store = _Store(stored)
    unknown = UnknownUsers(store)

    def answer(user: str, mechanism: str = "SCRAM-SHA-256") -> tuple[bytes, int]:
        server = ScramServer(mechanism, store.get_scram_credential, unknown=unknown.credential)
        return _server_first(server, user)

    alice_salt, alice_iterations = answer("alice")
    nobody_salt, nobody_iterations = answer("nobody")
    assert (len(nobody_salt), nobody_iterations) == (len(alice_salt), alice_iterations) == (20, 4096)
    assert answer("nobody") == (nobody_salt, nobody_iterations)  # asking again tells nothing
    assert answer("nobody2")[0] != nobody_salt
    assert answer("nobody", "SCRAM-SHA-512")[1] == 5000  # per mechanism
    assert (len(answer("x", "SCRAM-SHA-512")[0]), answer("alice", "SCRAM-SHA-512")[1]) == (32, 5000)
    assert store.reads == 1  # the shape is read once per refresh interval, not per login


def test_the_unknown_users_shape_follows_the_store_and_has_a_default() -> None:
    from quotaflow.gateway.auth.scram import UnknownUsers
    from quotaflow.store.scram import DEFAULT_ITERATIONS, SALT_BYTES

    now = [0.0]
    store = _Store([])
    unknown = UnknownUsers(store, refresh_s=30.0, clock=lambda: now[0])
    assert unknown.shape("SCRAM-SHA-256") == (SALT_BYTES, DEFAULT_ITERATIONS)  # an empty store: a new credential's
    store.credentials[("u", "SCRAM-SHA-256")] = scram_credential("u", "SCRAM-SHA-256", "pw", iterations=4096,
                                                                 salt=b"s" * 100)
    assert unknown.shape("SCRAM-SHA-256") == (SALT_BYTES, DEFAULT_ITERATIONS)  # within the refresh interval
    now[0] = 31.0
    assert unknown.shape("SCRAM-SHA-256") == (100, 4096)
    assert len(unknown.credential("SCRAM-SHA-256", "nobody").salt) == 100  # longer than one HMAC block too
    assert UnknownUsers(None).shape("SCRAM-SHA-512") == (SALT_BYTES, DEFAULT_ITERATIONS)


def test_a_signing_store_gives_the_fleet_one_salt_per_unknown_name() -> None:
    """Two gateways on one signed store answer an unknown name with the same salt (as they answer a stored user's);
    without signing keys each process has its own secret."""
    from types import SimpleNamespace

    from quotaflow.gateway.auth.scram import UnknownUsers, unknown_user_secret
    from quotaflow.store.signing import RecordSigner

    key = b"k" * 32
    one, two = (SimpleNamespace(signer=RecordSigner([key, b"o" * 32])) for _ in range(2))
    other = SimpleNamespace(signer=RecordSigner([b"x" * 32]))
    salts = [UnknownUsers(None, secret=unknown_user_secret(s)).credential("SCRAM-SHA-256", "nobody").salt
             for s in (one, two, other, object())]
    assert salts[0] == salts[1] and len({salts[0], salts[2], salts[3]}) == 3
    assert unknown_user_secret(object()) == unknown_user_secret(SimpleNamespace(signer=None))
