"""DescribeClientQuotas responses encoded directly (``gateway.wire.quota_entries``) are the bytes kafka-python's
generic encoder gives for the same message (what the gateway sent before), at v0 and the flexible v1; and a
describe of many entities makes no kafka-python message objects at all (the work that held the GIL for seconds)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.api_key import ApiKey

from quotaflow.admin import DescribedEntity
from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.validation import java_map_order
from quotaflow.gateway.wire import quota_entries
from quotaflow.gateway.wire.protocol import decode_response, encode_response, response_class
from quotaflow.gateway.wire.quota_entries import encode_describe_response

names = st.one_of(st.just(DEFAULT), st.text(min_size=0, max_size=140))
entities = st.one_of(
    st.builds(lambda u, c: QuotaEntity(user=u, client_id=c), names, st.one_of(st.none(), names)),
    st.builds(lambda c: QuotaEntity(client_id=c), names),
    st.builds(lambda ip: QuotaEntity(ip=ip), st.one_of(st.just(DEFAULT), st.sampled_from(["10.0.0.1", "::1"]))),
    st.builds(lambda u, p: QuotaEntity(user=u, client_id_prefix=p), st.one_of(st.none(), names),
              st.text(min_size=1, max_size=10)),
)
KEYS = ["producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate",
        "connection_creation_rate", "x"]
values = st.dictionaries(st.sampled_from(KEYS), st.floats(allow_nan=True, allow_infinity=True), max_size=4)
described = st.lists(st.builds(DescribedEntity, entities, values), max_size=30)


def generic(version: int, correlation_id: int, found: list[DescribedEntity] | None, error_code: int = 0,
            error_message: str | None = None, throttle_ms: int = 0) -> bytes:
    cls = response_class(ApiKey.DescribeClientQuotas, version)
    entry = cls.EntryData
    entries = None if found is None else [entry(
        entity=[entry.EntityData(entity_type=t, entity_name=d.entity.to_wire()[t])
                for t in java_map_order(d.entity.to_wire())],
        values=[entry.ValueData(key=k, value=float(d.values[k])) for k in java_map_order(d.values)])
        for d in found]
    return encode_response(cls(throttle_time_ms=throttle_ms, error_code=error_code, error_message=error_message,
                               entries=entries), version, correlation_id)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([0, 1]), st.integers(-(2**31), 2**31 - 1), described, st.integers(0, 2**31 - 1))
def test_same_bytes_as_kafka_pythons_encoder(version: int, correlation_id: int, found: list[DescribedEntity],
                                             throttle_ms: int) -> None:
    ours = encode_describe_response(version, correlation_id, found, throttle_ms=throttle_ms)
    assert ours == generic(version, correlation_id, found, throttle_ms=throttle_ms)
    back = decode_response(ours[4:], ApiKey.DescribeClientQuotas, version)
    assert len(back.entries) == len(found)
    for got, want in zip(back.entries, found, strict=True):
        assert {e.entity_type: e.entity_name for e in got.entity} == want.entity.to_wire()
        assert set(v.key for v in got.values) == set(want.values)
        assert all(v.value == want.values[v.key] or (math.isnan(v.value) and math.isnan(want.values[v.key]))
                   for v in got.values)


@given(st.sampled_from([0, 1]), st.sampled_from([(31, None), (42, "Invalid match type 7"), (35, "é" * 200)]))
def test_error_responses_are_the_same_bytes(version: int, error: tuple[int, str | None]) -> None:
    code, message = error
    assert (encode_describe_response(version, 9, None, error_code=code, error_message=message)
            == generic(version, 9, None, code, message))


def test_a_large_describe_uses_multi_byte_lengths(monkeypatch: pytest.MonkeyPatch) -> None:
    """200 entities (a compact array length past one varint byte), a 300-character name, joined 16 at a time."""
    monkeypatch.setattr(quota_entries, "JOIN_ENTRIES", 16)
    found = [DescribedEntity(QuotaEntity(user=f"u{i}" * (1 if i else 100), client_id=DEFAULT),
                             {"producer_byte_rate": float(i)}) for i in range(200)]
    for version in (0, 1):
        assert encode_describe_response(version, 1, found) == generic(version, 1, found)
