"""ClientQuotaControlManagerTest (TEST-CASES §7) at the level of the individual checks."""

from __future__ import annotations

import math

import pytest

from quotaflow.core.errors import InvalidRequestError, KafkaError
from quotaflow.core.keys import CLIENT_QUOTA_KEYS, IP_QUOTA_KEYS
from quotaflow.core.validation import (
    config_keys_for_entity,
    is_valid_ip_entity,
    java_map_order,
    render_raw_entity,
    validate_entity,
    validate_quota_key_value,
)


def no_dns(host: str) -> bool:
    """Test resolver: only names under .test resolve, nothing touches the network."""
    return host.endswith(".test")


def message(fn: object, *args: object) -> str | None:
    try:
        fn(*args)  # type: ignore[operator]
    except KafkaError as e:
        assert isinstance(e, InvalidRequestError)
        return e.message
    return None


@pytest.mark.parametrize(
    ("entity", "expected"),
    [
        ({"foo": "bar"}, "Unhandled client quota entity type: foo"),
        ({None: "null"}, "Unhandled client quota entity type: null"),
        ({"user": "user-1", "foo": "bar"}, "Unhandled client quota entity type: foo"),
        ({"": "name"}, "Unhandled client quota entity type: "),
        ({}, "Invalid empty client quota entity"),
        ({"user": ""}, "Empty user not supported"),
        ({"client-id": ""}, "Empty client-id not supported"),
        ({"user": "user-1", "client-id": None}, None),
        ({"ip": None}, None),
    ],
)
def test_validate_entity(entity: dict[str | None, str | None], expected: str | None) -> None:
    assert message(validate_entity, entity) == expected


def test_validate_entity_reports_first_problem_in_hashmap_order() -> None:
    # HashMap order of {"foo", "user"}: "foo" comes first whatever the insertion order
    assert java_map_order(["user", "foo"]) == java_map_order(["foo", "user"])
    first = java_map_order(["user", "foo"])[0]
    expected = "Unhandled client quota entity type: foo" if first == "foo" else "Empty user not supported"
    assert message(validate_entity, {"user": "", "foo": "bar"}) == expected


@pytest.mark.parametrize(
    ("entity", "expected"),
    [
        # beyond Kafka: a user alone may also hold a per-principal connection_creation_rate (issue 20 item 3)
        ({"user": "u"}, CLIENT_QUOTA_KEYS | {"connection_creation_rate"}),
        ({"user": None}, CLIENT_QUOTA_KEYS | {"connection_creation_rate"}),
        ({"client-id": "c"}, CLIENT_QUOTA_KEYS),
        ({"client-id-prefix": "etl-"}, CLIENT_QUOTA_KEYS),
        ({"ip": "10.1.0.0/16"}, IP_QUOTA_KEYS),
        ({"ip": "2001:db8::/32"}, IP_QUOTA_KEYS),
        ({"client-id": "c", "user": "u"}, CLIENT_QUOTA_KEYS),
        ({"ip": "127.0.0.1"}, IP_QUOTA_KEYS),
        ({"ip": None}, IP_QUOTA_KEYS),
    ],
)
def test_config_keys_for_entity(entity: dict[str | None, str | None], expected: frozenset[str]) -> None:
    assert config_keys_for_entity(entity, no_dns) == expected


@pytest.mark.parametrize(
    ("entity", "expected"),
    [
        ({}, "Invalid empty client quota entity"),
        ({"ip": "1.2.3.4", "user": "u"}, "Invalid quota entity combination, IP entity shouldnot be combined with "
         "User or ClientId"),
        ({"client-id": "c", "ip": None}, "Invalid quota entity combination, IP entity shouldnot be combined with "
         "User or ClientId"),
        ({"ip": "example.invalid"}, "example.invalid is not a valid IP or resolvable host."),
        ({"ip": "not a valid host because it has spaces"},
         "not a valid host because it has spaces is not a valid IP or resolvable host."),
        ({"ip": "RFC2606.invalid"}, "RFC2606.invalid is not a valid IP or resolvable host."),
        # beyond Kafka's model: its own messages above are unchanged, the new shapes get their own
        ({"ip": "10.1.0.5/16"}, "10.1.0.5/16 is not a valid CIDR range: 10.1.0.5/16 has host bits set."),
        ({"ip": "10.1.0.0/33"}, "10.1.0.0/33 is not a valid CIDR range: '10.1.0.0/33' does not appear to be an "
         "IPv4 or IPv6 network."),
        ({"client-id-prefix": "etl-", "user": "u"}, "Invalid quota entity combination, a client-id-prefix entity "
         "cannot be combined with user, client-id or ip"),
        ({"client-id-prefix": "etl-", "ip": None}, "Invalid quota entity combination, a client-id-prefix entity "
         "cannot be combined with user, client-id or ip"),
        ({"client-id-prefix": None}, "Invalid client quota entity: client-id-prefix has no default entity, name a "
         "prefix"),
    ],
)
def test_config_keys_errors(entity: dict[str | None, str | None], expected: str) -> None:
    assert message(config_keys_for_entity, entity, no_dns) == expected


def test_is_valid_ip_entity() -> None:
    assert is_valid_ip_entity(None, no_dns)
    assert is_valid_ip_entity("127.0.0.1", no_dns)
    assert is_valid_ip_entity("::1", no_dns)
    assert is_valid_ip_entity("broker.test", no_dns)
    assert not is_valid_ip_entity("example.invalid", no_dns)
    # the default resolver: a literal needs no lookup
    assert is_valid_ip_entity("10.1.2.3")


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("foobar", 1.0, "Invalid configuration key foobar"),
        (None, 99.9, "Invalid configuration key null"),
        ("connection_creation_rate", 10.0, "Invalid configuration key connection_creation_rate"),
        ("producer_byte_rate", 0.0, "Quota producer_byte_rate must be greater than 0"),
        ("consumer_byte_rate", -2.0, "Quota consumer_byte_rate must be greater than 0"),
        ("consumer_byte_rate", 1234.0, None),
        ("consumer_byte_rate", 36893488147419103232.4,
         "Proposed value for consumer_byte_rate is too large for a LONG."),
        ("consumer_byte_rate", 2.245, "consumer_byte_rate cannot be a fractional value."),
        ("consumer_byte_rate", 1235.0000001, None),
        ("consumer_byte_rate", 1234.9999999, "consumer_byte_rate cannot be a fractional value."),
        ("request_percentage", 56.62367, None),
        ("request_percentage", 200.0, None),
        ("controller_mutation_rate", 0.5, None),
        ("producer_byte_rate", 10000.5, "producer_byte_rate cannot be a fractional value."),
        ("producer_byte_rate", 9.223372036854775807e18, None),
    ],
)
def test_validate_client_key_value(key: str | None, value: float, expected: str | None) -> None:
    assert message(validate_quota_key_value, CLIENT_QUOTA_KEYS, key, value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (2147483648.0, "Proposed value for connection_creation_rate is too large for an INT."),
        (2147483647.0, None),
        (10.5, "connection_creation_rate cannot be a fractional value."),
        (100.0, None),
        (math.inf, "Proposed value for connection_creation_rate is too large for an INT."),
        (math.nan, "connection_creation_rate cannot be a fractional value."),
    ],
)
def test_validate_ip_key_value(value: float, expected: str | None) -> None:
    assert message(validate_quota_key_value, IP_QUOTA_KEYS, "connection_creation_rate", value) == expected


def test_non_finite_values_follow_java_comparisons() -> None:
    # NaN <= 0 is false and DOUBLE keys have no upper bound: NaN and +Inf pass; -Inf is <= 0
    assert message(validate_quota_key_value, CLIENT_QUOTA_KEYS, "request_percentage", math.nan) is None
    assert message(validate_quota_key_value, CLIENT_QUOTA_KEYS, "request_percentage", math.inf) is None
    assert message(validate_quota_key_value, CLIENT_QUOTA_KEYS, "request_percentage", -math.inf) == (
        "Quota request_percentage must be greater than 0"
    )
    assert message(validate_quota_key_value, CLIENT_QUOTA_KEYS, "producer_byte_rate", math.inf) == (
        "Proposed value for producer_byte_rate is too large for a LONG."
    )


def test_render_raw_entity_handles_null_type() -> None:
    assert render_raw_entity({"user": "alice"}) == "ClientQuotaEntity(entries={user=alice})"
    assert render_raw_entity({None: "x"}) == "ClientQuotaEntity(entries={null=x})"
    assert render_raw_entity({"user": None, None: "x"}).startswith("ClientQuotaEntity(entries={null=x, ")
