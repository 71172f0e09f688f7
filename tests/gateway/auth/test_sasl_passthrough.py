"""SASL passthrough: the principal read from a client's exchange with its broker (PLAIN, SCRAM, OAUTHBEARER)."""

from __future__ import annotations

import base64
import json

from kafka.protocol.api_key import ApiKey
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest

from quotaflow.gateway.auth.sasl_passthrough import (
    SaslPassthrough,
    oauthbearer_principal,
    plain_principal,
    scram_principal,
)
from quotaflow.gateway.data import versions
from quotaflow.gateway.wire import protocol


def test_principals_from_client_tokens() -> None:
    assert plain_principal(b"\x00alice\x00secret") == "alice"
    assert plain_principal(b"admin\x00alice\x00secret") == "admin"  # the authzid when given
    assert plain_principal(b"no separators") is None
    assert scram_principal(b"n,,n=bob=2Cjr=3D,r=fyko+d2lbbFgONRv9qkxdawL") == "bob,jr="
    assert scram_principal(b"n,a=carol,n=bob,r=abc") == "carol"
    assert scram_principal(b"garbage") is None
    claims = base64.urlsafe_b64encode(json.dumps({"sub": "dave", "exp": 1}).encode()).rstrip(b"=").decode()
    token = f"n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.{claims}.\x01\x01".encode()
    assert oauthbearer_principal(token) == "dave"
    assert oauthbearer_principal(b"n,,\x01auth=Bearer not-a-jwt\x01\x01") is None


def _header(key: int, version: int) -> protocol.RequestHeader:
    return protocol.RequestHeader(key, version, 1, "c", 0)


def _request(message: object, key: int, version: int) -> bytes:
    message.with_header(correlation_id=1, client_id="c")  # type: ignore[attr-defined]
    frame = bytes(message.encode(version=version, header=True))  # type: ignore[attr-defined]
    return frame


def _authenticate_response(version: int, error: int) -> bytes:
    message = SaslAuthenticateResponse[version](error_code=error, error_message=None, auth_bytes=b"",
                                                session_lifetime_ms=0)
    return protocol.encode_response(message, version, 1)[4:]


def test_scram_is_accepted_after_its_second_round_only() -> None:
    watch = SaslPassthrough()
    frame = _request(SaslHandshakeRequest[1](mechanism="SCRAM-SHA-512"), ApiKey.SaslHandshake, 1)
    watch.request(protocol.parse_request_header(frame), frame)
    first = _request(SaslAuthenticateRequest[2](auth_bytes=b"n,,n=erin,r=abc"), ApiKey.SaslAuthenticate, 2)
    watch.request(protocol.parse_request_header(first), first)
    assert watch.response(ApiKey.SaslAuthenticate, 2, _authenticate_response(2, 0)) is None  # server-first
    final = _request(SaslAuthenticateRequest[2](auth_bytes=b"c=biws,r=abcdef,p=proof"), ApiKey.SaslAuthenticate, 2)
    watch.request(protocol.parse_request_header(final), final)
    assert watch.response(ApiKey.SaslAuthenticate, 2, _authenticate_response(2, 0)) == "erin"


def test_a_refused_exchange_names_nobody() -> None:
    watch = SaslPassthrough()
    frame = _request(SaslHandshakeRequest[1](mechanism="PLAIN"), ApiKey.SaslHandshake, 1)
    watch.request(protocol.parse_request_header(frame), frame)
    auth = _request(SaslAuthenticateRequest[1](auth_bytes=b"\x00frank\x00wrong"), ApiKey.SaslAuthenticate, 1)
    watch.request(protocol.parse_request_header(auth), auth)
    assert watch.response(ApiKey.SaslAuthenticate, 1, _authenticate_response(1, 58)) is None


def test_passthrough_offers_the_upstreams_sasl_versions_from_v1() -> None:
    upstream = [(17, 0, 1), (36, 0, 2), (3, 0, 12)]
    merged = {k: (lo, hi) for k, lo, hi in versions.merge(upstream, sasl_passthrough=True)}
    assert merged[17] == (1, 1) and merged[36] == (0, 2)
    assert merged[48] == (0, 1) and merged[49] == (0, 1)
    assert {k: (lo, hi) for k, lo, hi in versions.merge([(3, 0, 12)], sasl_passthrough=True)}.keys() == {3, 48, 49}
