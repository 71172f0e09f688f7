from __future__ import annotations

import pytest
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import ApiVersionsResponse

from quotaflow.gateway.data import versions
from quotaflow.gateway.data.connection import _supported
from quotaflow.gateway.wire import protocol


def test_merge_offers_what_the_gateway_can_authorize_and_caps_what_it_decodes_or_names_brokers() -> None:
    upstream = [(0, 0, 11), (1, 5, 17), (3, 0, 99), (18, 0, 9), (19, 0, 99), (32, 0, 9), (48, 0, 0), (17, 0, 1),
                (20, 0, 6), (55, 0, 2), (68, 0, 1), (69, 0, 0), (71, 0, 0), (76, 0, 1), (78, 0, 1), (79, 0, 1),
                (38, 0, 3), (9999, 0, 3)]
    merged = {k: (lo, hi) for k, lo, hi in versions.merge(upstream)}
    assert merged[0] == (3, 9)  # Produce v10+ names brokers (KIP-951), v13+ topic ids; v3+ read for authorization
    assert merged[1] == (5, 12)  # Fetch v13+ names topics by id: the gateway authorizes names
    assert merged[20] == (1, 5)  # DeleteTopics v6+ may name topics by id; v0 is not in Kafka's definition
    assert merged[3] == (1, protocol.max_known_version(3))  # rewritten: capped to what kafka-python decodes
    assert merged[18] == (0, versions.APIVERSIONS_MAX)
    assert merged[19] == (2, protocol.max_known_version(19))  # decoded for the mutation quota; v2+ defined
    assert merged[32] == (1, min(9, protocol.max_known_version(32) or 0))  # decoded when authorized
    assert merged[55] == (0, 1)  # DescribeQuorum v2 names the controllers
    assert merged[48] == (0, 1) and merged[49] == (0, 1)  # the gateway's own, whatever the upstream says
    assert merged[50] == (0, 0) and merged[51] == (0, 0)  # KIP-554 from the gateway's own credentials
    assert merged[17] == (0, 1) and merged[36] == (0, 2)
    # the gateway cannot authorize these exactly: not offered (KIP-848 heartbeats carry topic ids and server-side
    # regexes, delegation tokens would be the gateway's own, unknown APIs may name anything)
    for key in (38, 68, 76, 9999):
        assert key not in merged
    assert 78 not in merged and 79 not in merged  # NodeEndpoints in every version: never offered
    # no message definition in kafka-python 3.0.12 (telemetry, ConsumerGroupDescribe, delegation tokens): the
    # gateway cannot read them, so it offers them in no mode
    passthrough = {k: (lo, hi) for k, lo, hi in versions.merge(upstream, sasl_passthrough=True)}
    for key in (38, 69, 71):
        assert key not in merged and key not in passthrough
        assert key not in {k for k, _lo, _hi in versions.merge(upstream, authorizer=True)}


MODES = [dict(sasl_passthrough=p, authorizer=a) for p in (False, True) for a in (False, True)]


@pytest.mark.parametrize("mode", MODES)
def test_the_gate_takes_exactly_what_api_versions_advertises(mode: dict[str, bool]) -> None:
    # an upstream that speaks every version of every API: what is advertised is the gateway's ceiling
    upstream = [(k, 0, 200) for k in range(versions.GATE_KEYS + 5)]
    advertised = {k: (lo, hi) for k, lo, hi in versions.merge(upstream, **mode)}
    table = versions.gate_table(**mode)
    for key in range(-1, versions.GATE_KEYS + 5):
        for version in range(-1, 40):
            lo, hi = advertised.get(key, (1, 0))
            assert _supported(table, key, version) == (lo <= version <= hi), (key, version)


def test_the_gate_refuses_the_attacks_of_issue_34() -> None:
    for mode in MODES:
        table = versions.gate_table(**mode)
        assert not _supported(table, ApiKey.DeleteTopics, 6)  # by id, and its v0-5 name field is empty
        assert not _supported(table, ApiKey.Fetch, 13) and not _supported(table, ApiKey.Produce, 13)  # by id
        assert _supported(table, ApiKey.DeleteTopics, 5) and _supported(table, ApiKey.Fetch, 12)


def _api_versions_frame(version: int, keys: list[tuple[int, int, int]]) -> bytes:
    cls = ApiVersionsResponse
    msg = cls[version](
        error_code=0,
        throttle_time_ms=0,
        api_keys=[cls.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in keys],
    )
    return protocol.encode_response(msg, version, 5)[4:]


def test_rewrite_response() -> None:
    for version in (0, 1, 2, 3):
        out = versions.rewrite_response(_api_versions_frame(version, [(0, 0, 11), (18, 0, 4)]), version)
        decoded = ApiVersionsResponse.decode(out[4:], version=version, header=True)
        keys = {a.api_key: (a.min_version, a.max_version) for a in decoded.api_keys}
        assert decoded.header.correlation_id == 5
        assert keys[ApiKey.DescribeClientQuotas] == (0, 1) and keys[0] == (3, 9) and keys[18] == (0, 4)


def test_kip511_fallback_is_a_v0_body() -> None:
    out = versions.unsupported_version_response(77)
    decoded = ApiVersionsResponse.decode(out[4:], version=0, header=True)
    assert decoded.error_code == 35 and decoded.header.correlation_id == 77
    assert [(a.api_key, a.min_version, a.max_version) for a in decoded.api_keys] == [(18, 0, versions.APIVERSIONS_MAX)]


def test_an_upstream_that_does_not_speak_the_version_passes_its_range_on() -> None:
    # KIP-511 from the upstream: error 35 in a v0 body, whatever version was asked (librdkafka's mock cluster does
    # this for ApiVersions v4); the client must be told a range the upstream speaks, or it retries forever
    cls = ApiVersionsResponse
    body = cls[0](error_code=35, api_keys=[cls.ApiVersion(api_key=18, min_version=0, max_version=3)])
    out = versions.rewrite_response(protocol.encode_response(body, 0, 9)[4:], 4)
    decoded = ApiVersionsResponse.decode(out[4:], version=0, header=True)
    assert decoded.error_code == 35 and decoded.header.correlation_id == 9
    assert [(a.api_key, a.min_version, a.max_version) for a in decoded.api_keys] == [(18, 0, 3)]


def test_an_upstream_error_body_that_is_not_v0_steps_the_client_down() -> None:
    # librdkafka's mock cluster answers ApiVersions v3 with error 35 in a body of its own shape (bytes as captured)
    frame = bytes.fromhex("00000007" "0023" "01" "0012" "0000" "0002" "00000000")
    out = versions.rewrite_response(frame, 3)
    decoded = ApiVersionsResponse.decode(out[4:], version=0, header=True)
    assert decoded.error_code == 35 and decoded.header.correlation_id == 7
    assert [(a.api_key, a.min_version, a.max_version) for a in decoded.api_keys] == [(18, 0, 2)]


def test_acl_apis_are_the_gateways_unless_the_cluster_authenticates() -> None:
    upstream = [(18, 0, 3), (29, 0, 3), (30, 0, 3), (31, 0, 3)]
    own = {k: (lo, hi) for k, lo, hi in versions.merge(upstream)}
    assert own[29] == own[30] == own[31] == (1, 3)  # answered from the store, what kafka-python encodes
    assert {k: (lo, hi) for k, lo, hi in versions.merge([(18, 0, 3)])}[30] == (1, 3)  # whatever the upstream offers
    passthrough = {k: (lo, hi) for k, lo, hi in versions.merge(upstream, sasl_passthrough=True)}
    assert passthrough[29] == passthrough[30] == passthrough[31] == (1, 3)  # the cluster's (v1+ defined)
    assert 30 not in {k for k, _lo, _hi in versions.merge([(18, 0, 3)], sasl_passthrough=True)}
