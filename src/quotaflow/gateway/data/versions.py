"""ApiVersions at the gateway: what the client is told it may send, and the gate that holds every request to it.

The advertised set is every API the upstream offers that the gateway reads and authorizes completely
(``authorize.forwardable``: a planner and a row in the rule table, ``auth.rules``, over the resource-bearing fields
of Kafka's own message definitions, ``auth.resources``), at the versions whose fields the rule table covers, with the
gateway's own APIs added: DescribeClientQuotas (48) and AlterClientQuotas (49) v0–1, answered from the quota store,
DescribeAcls / CreateAcls / DeleteAcls (29–31) v1–3, answered from the store's ACLs, and SaslHandshake (17) /
SaslAuthenticate (36), terminated here. An API without a message definition in kafka-python 3.0.12 is not offered;
address-bearing versions the gateway does not rewrite are capped below them (``addresses.ADDRESS_VERSION_CAPS``); an
API with no version free of broker addresses is not offered.

One rule (:func:`offered`) gives both the advertised ranges (:func:`merge`, cut to the upstream's) and the gate's
table (:func:`gate_table`), which the connection core checks every request header against before anything reads
the request: what is not advertised is never forwarded.

KIP-511: a client asking for a newer ApiVersions than the gateway knows gets UNSUPPORTED_VERSION with a v0 body
listing the ApiVersions range, and retries with a version from it.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from kafka.protocol.api_key import ApiKey

from quotaflow.core.errors import UnsupportedVersionError
from quotaflow.gateway.auth import authorize
from quotaflow.gateway.data.addresses import ADDRESS_VERSION_CAPS, NEVER_OFFERED
from quotaflow.gateway.wire import protocol
from quotaflow.gateway.wire.protocol import RESPONSES, encode_response, max_known_version

# Served by the gateway itself, whatever the upstream supports: key -> (min, max).
GATEWAY_APIS: Final[dict[int, tuple[int, int]]] = {
    ApiKey.DescribeClientQuotas: (0, 1),
    ApiKey.AlterClientQuotas: (0, 1),
    ApiKey.DescribeUserScramCredentials: (0, 0),  # KIP-554, from the gateway's own credentials
    ApiKey.AlterUserScramCredentials: (0, 0),
    # the ACL APIs, answered from the store: v1-3, what kafka-python encodes (v0 left Kafka in 4.0)
    ApiKey.DescribeAcls: (1, 3),
    ApiKey.CreateAcls: (1, 3),
    ApiKey.DeleteAcls: (1, 3),
    ApiKey.SaslHandshake: (0, 1),
    ApiKey.SaslAuthenticate: (0, 2),
}
APIVERSIONS_MAX: Final = max_known_version(ApiKey.ApiVersions) or 0
SASL_APIS: Final = frozenset({ApiKey.SaslHandshake, ApiKey.SaslAuthenticate})
ACL_APIS: Final = frozenset({ApiKey.DescribeAcls, ApiKey.CreateAcls, ApiKey.DeleteAcls})
SCRAM_APIS: Final = frozenset({ApiKey.DescribeUserScramCredentials, ApiKey.AlterUserScramCredentials})
# with SASL passthrough the cluster authenticates and authorizes: its SASL, ACL and SCRAM-credential APIs answer,
# not the gateway's
PASSTHROUGH_APIS: Final = SASL_APIS | ACL_APIS | SCRAM_APIS


def offered(key: int, *, sasl_passthrough: bool = False, authorizer: bool = False) -> tuple[int, int] | None:
    """The versions of ``key`` the gateway itself can take, whatever the upstream offers (None: none). The one rule
    behind both ApiVersions (:func:`merge` intersects it with the upstream's range) and the gate every request
    passes (:func:`gate_table`), so what is advertised and what is accepted cannot disagree.

    The gateway's own APIs: their fixed ranges. Anything else only if the gateway can authorize it
    (``authorize.forwardable``, ``authorize.version_range``; ``authorizer``: whether one is on), never an API
    that names broker addresses in every version (``addresses.NEVER_OFFERED``), and only the versions kafka-python
    3.0.12 has Kafka's message definition for (the gateway cannot read, authorize or frame an answer to a request
    it has no schema for: an API without one is not offered at all), below the first that names broker addresses
    the gateway does not rewrite (``addresses.ADDRESS_VERSION_CAPS``). With ``sasl_passthrough`` the SASL, ACL and
    SCRAM-credential APIs are the upstream's (SaslHandshake from v1: v0's raw tokens have no Kafka framing to
    forward)."""
    if not (sasl_passthrough and key in PASSTHROUGH_APIS) and key in GATEWAY_APIS:
        return GATEWAY_APIS[key]
    if key in NEVER_OFFERED or not authorize.forwardable(key):
        return None  # an API the gateway cannot authorize is not offered (nor forwarded)
    cls, known = protocol.REQUESTS.get(key), max_known_version(key)
    if cls is None or known is None:
        return None
    lo, hi = authorize.version_range(key, int(cls.min_version), known)
    if key == ApiKey.SaslHandshake:
        lo = max(lo, 1)
    hi = min(hi, ADDRESS_VERSION_CAPS.get(key, hi))
    return (lo, hi) if lo <= hi else None


def merge(upstream: list[tuple[int, int, int]], *, sasl_passthrough: bool = False,
          authorizer: bool = False) -> list[tuple[int, int, int]]:
    """(key, min, max) triples to advertise, sorted by key: each upstream range cut to what the gateway takes
    (:func:`offered`), and the gateway's own APIs whatever the upstream says."""
    merged: dict[int, tuple[int, int]] = {}
    for key, lo, hi in upstream:
        mine = offered(key, sasl_passthrough=sasl_passthrough, authorizer=authorizer)
        if mine is None or key in merged:
            continue
        lo, hi = max(lo, mine[0]), min(hi, mine[1])
        if lo <= hi:
            merged[key] = (lo, hi)
    for key, (lo, hi) in GATEWAY_APIS.items():
        if not (sasl_passthrough and key in PASSTHROUGH_APIS):
            merged[key] = (lo, hi)
    return [(k, lo, hi) for k, (lo, hi) in sorted(merged.items())]


GATE_KEYS: Final = max((*protocol.REQUESTS, *GATEWAY_APIS)) + 1
"""The gate's table covers API keys below this; any higher key is refused."""
_CLOSED: Final = (0xFF, 0x00)  # an empty range: lo > hi


@functools.cache
def gate_table(*, sasl_passthrough: bool, authorizer: bool) -> bytes:
    """The gate's table for one mode: two bytes per API key, its lowest and highest version the gateway takes
    (:func:`offered`; an empty range for an API it does not take). The connection core checks every request's
    header against it (``connection._supported``) before anything else reads the request: a request for an API or
    version the gateway does not advertise is never forwarded, whatever the upstream speaks (Kafka closes a
    connection whose request names an API or version it does not support; ApiVersions gets KIP-511's
    UNSUPPORTED_VERSION instead)."""
    table = bytearray()
    for key in range(GATE_KEYS):
        mine = offered(key, sasl_passthrough=sasl_passthrough, authorizer=authorizer)
        table += bytes(_CLOSED if mine is None else mine)
    return bytes(table)


def _api_version(cls: Any, key: int, lo: int, hi: int) -> Any:
    return cls.ApiVersion(api_key=key, min_version=lo, max_version=hi)


def rewrite_response(upstream_frame: bytes, version: int, throttle_ms: int = 0, *,
                     sasl_passthrough: bool = False, authorizer: bool = False) -> bytes:
    """The upstream's ApiVersions response with the merged version list (same header, same correlation id) and
    ``throttle_time_ms`` raised to ``throttle_ms`` (v1+)."""
    cls = RESPONSES[ApiKey.ApiVersions]
    error_code = protocol.INT16.unpack_from(upstream_frame, 4)[0]  # after the v0 header, in every version
    if error_code != 0:
        # KIP-511: the upstream does not speak this version and answered with a v0 body naming its own ApiVersions
        # range; pass that range on, capped to the gateway's, so the client retries with one both speak. A body
        # that is not v0 (librdkafka's mock cluster writes its own shape) gets one version less, so a client's
        # retries step down to one the upstream speaks.
        lo, hi = 0, max(0, min(APIVERSIONS_MAX, version - 1))
        try:
            message = cls.decode(upstream_frame, version=0, header=True)
        except Exception:  # kafka-python raises assorted errors on malformed input
            message = None
        if message is not None:
            for entry in message.api_keys:
                if entry.api_key == ApiKey.ApiVersions:
                    lo, hi = entry.min_version, min(entry.max_version, APIVERSIONS_MAX)
        fallback = cls[0](error_code=error_code, api_keys=[_api_version(cls, ApiKey.ApiVersions, lo, hi)])
        return encode_response(fallback, 0, protocol.response_correlation_id(upstream_frame))
    message = cls.decode(upstream_frame, version=version, header=True)
    correlation_id = message.header.correlation_id
    triples = merge([(a.api_key, a.min_version, a.max_version) for a in message.api_keys],
                    sasl_passthrough=sasl_passthrough, authorizer=authorizer)
    message.api_keys = [_api_version(cls, k, lo, hi) for k, lo, hi in triples]
    if version >= 1:
        message.throttle_time_ms = max(int(message.throttle_time_ms), throttle_ms)
    return encode_response(message, version, correlation_id)


def unsupported_version_response(correlation_id: int) -> bytes:
    """KIP-511: UNSUPPORTED_VERSION in a v0 body that names the ApiVersions versions the gateway does speak."""
    cls = RESPONSES[ApiKey.ApiVersions]
    message = cls[0](error_code=UnsupportedVersionError.errno,
                     api_keys=[_api_version(cls, ApiKey.ApiVersions, 0, APIVERSIONS_MAX)])
    return encode_response(message, 0, correlation_id)
