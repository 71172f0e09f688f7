from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.api_key import ApiKey
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest

from quotaflow.core.errors import InvalidRequestError
from quotaflow.gateway.wire import protocol


def _produce(version: int, acks: int, txn: str | None) -> bytes:
    t = ProduceRequest.TopicProduceData
    req = ProduceRequest[version](
        transactional_id=txn,
        acks=acks,
        timeout_ms=1000,
        topic_data=[t(name="t", partition_data=[t.PartitionProduceData(index=0, records=b"x" * 10)])],
    )
    req.with_header(correlation_id=42, client_id="my-client")
    return bytes(req.encode(header=True))


@pytest.mark.parametrize("version", [3, 7, 8, 9, 11])
@pytest.mark.parametrize("acks", [-1, 0, 1])
@pytest.mark.parametrize("txn", [None, "tx-1"])
def test_header_and_acks_match_kafka_python(version: int, acks: int, txn: str | None) -> None:
    frame = _produce(version, acks, txn)
    header = protocol.parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (0, version, 42)
    assert header.client_id == "my-client"
    assert protocol.produce_acks(frame, header) == acks
    decoded = protocol.decode_request(frame, header)
    assert decoded.acks == acks and decoded.transactional_id == txn


def test_null_client_id_and_short_frames() -> None:
    req = ApiVersionsRequest[0]()
    req.with_header(correlation_id=7, client_id=None)
    header = protocol.parse_request_header(bytes(req.encode(header=True)))
    assert header.client_id is None and header.correlation_id == 7
    with pytest.raises(InvalidRequestError):
        protocol.parse_request_header(b"\x00\x03\x00")
    with pytest.raises(InvalidRequestError):
        protocol.parse_request_header(b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x09ab")  # client_id past the end


def test_decode_rejects_unknown_versions_and_garbage() -> None:
    header = protocol.RequestHeader(ApiKey.Metadata, 999, 1, None, 10)
    with pytest.raises(InvalidRequestError):
        protocol.decode_request(b"\x00" * 20, header)
    frame = _produce(9, 1, None)[:25]
    with pytest.raises(InvalidRequestError):
        protocol.decode_request(frame, protocol.parse_request_header(frame))


def _metadata_frame(version: int, throttle: int) -> bytes:
    b = MetadataResponse.MetadataResponseBroker
    msg = MetadataResponse[version](
        throttle_time_ms=throttle,
        brokers=[b(node_id=1, host="h", port=9, rack=None)],
        cluster_id="c",
        controller_id=1,
        topics=[],
    )
    return protocol.encode_response(msg, version, 99)[4:]


@pytest.mark.parametrize("version", [3, 9, 12])
def test_set_throttle_takes_the_max(version: int) -> None:
    frame = _metadata_frame(version, 50)
    out = protocol.set_throttle(frame, ApiKey.Metadata, version, 200)
    assert out is not None and protocol.SIZE.unpack(out[:4])[0] == len(out) - 4
    assert protocol.throttle_of(out[4:], ApiKey.Metadata, version) == 200
    assert protocol.response_correlation_id(out[4:]) == 99
    lower = protocol.set_throttle(frame, ApiKey.Metadata, version, 10)
    assert lower is not None and protocol.throttle_of(lower[4:], ApiKey.Metadata, version) == 50


def test_set_throttle_without_field() -> None:
    assert protocol.set_throttle(_metadata_frame(0, 0), ApiKey.Metadata, 0, 100) is None


@pytest.mark.parametrize("version", [4, 7, 12, 16])
def test_empty_fetch_response_keeps_session(version: int) -> None:
    fields = {"throttle_time_ms": 5, "responses": []}
    if version >= 7:
        fields |= {"error_code": 0, "session_id": 1234}
    upstream = protocol.encode_response(FetchResponse[version](**fields), version, 3)[4:]
    out = protocol.empty_fetch_response(upstream, version, 700)
    decoded = protocol.decode_response(out[4:], ApiKey.Fetch, version)
    assert decoded.throttle_time_ms == 700 and decoded.responses == []
    assert decoded.header.correlation_id == 3
    if version >= 7:
        assert decoded.session_id == 1234


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.sampled_from([0, 1, 3, 17, 18, 36, 48, 49]), st.integers(-1, 20))
def test_fuzzed_frames_fail_only_with_invalid_request(tail: bytes, api_key: int, version: int) -> None:
    frame = struct.pack(">hhi", api_key, version, 1) + tail
    try:
        header = protocol.parse_request_header(frame)
        if api_key == 0:
            protocol.produce_acks(frame, header)
        protocol.decode_request(frame, header)
    except InvalidRequestError:
        pass  # the connection is closed; anything else would be a gateway bug


def _batches(base: int, count: int, value_size: int) -> bytes:
    """``count`` real record batches (kafka-python's builder, magic 2), one record of ``value_size`` bytes each."""
    from kafka.record.memory_records import MemoryRecordsBuilder

    out = b""
    for i in range(count):
        builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=value_size * 2, offset=base + i)
        builder.append(timestamp=1, key=None, value=b"v" * value_size, headers=[])
        builder.close()
        out += builder.buffer()
    return out


def _fetch_frame(version: int, partitions: list[bytes]) -> bytes:
    P = FetchResponse[version].FetchableTopicResponse.PartitionData
    parts = [P(partition_index=i, error_code=0, high_watermark=99, records=r) for i, r in enumerate(partitions)]
    topic = FetchResponse[version].FetchableTopicResponse(topic="t", partitions=parts)
    fields = {"throttle_time_ms": 0, "responses": [topic]}
    if version >= 7:
        fields |= {"error_code": 0, "session_id": 7}
    return protocol.encode_response(FetchResponse[version](**fields), version, 5)[4:]


@pytest.mark.parametrize("version", [4, 11, 12])
def test_a_fetch_response_is_trimmed_to_whole_batches_within_max_bytes(version: int) -> None:
    batch = len(_batches(0, 1, 1000))
    frame = _fetch_frame(version, [_batches(0, 5, 1000), _batches(0, 5, 1000)])
    assert protocol.trim_fetch_response(frame, version, len(frame)) is None  # within the limit: untouched
    cap = len(frame) - 10 * batch + 3 * batch + 10  # room for three batches beside the response's own fields
    out = protocol.trim_fetch_response(frame, version, cap)
    assert out is not None and len(out) <= cap
    decoded = protocol.decode_response(out, ApiKey.Fetch, version)
    first, second = decoded.responses[0].partitions
    assert bytes(first.records) == _batches(0, 3, 1000)  # whole batches, in order, from the first offset
    assert bytes(second.records) == b"" and second.high_watermark == 99  # fetched again later from the same offset
    assert decoded.header.correlation_id == 5
    if version >= 7:
        assert decoded.session_id == 7


def test_the_first_batch_is_kept_even_when_it_alone_is_larger_than_max_bytes() -> None:
    """KIP-74: the first record batch of the first partition with data is always returned, so progress is made."""
    frame = _fetch_frame(12, [b"", _batches(10, 2, 5000), _batches(0, 1, 10)])
    out = protocol.trim_fetch_response(frame, 12, 1000)
    assert out is not None
    empty, big, small = protocol.decode_response(out, ApiKey.Fetch, 12).responses[0].partitions
    assert bytes(empty.records or b"") == b"" and bytes(big.records) == _batches(10, 1, 5000)
    assert bytes(small.records) == b""


def test_a_partial_batch_at_the_end_is_cut() -> None:
    whole = _batches(0, 2, 100)
    frame = _fetch_frame(12, [whole + _batches(2, 1, 100)[:50]])
    out = protocol.trim_fetch_response(frame, 12, len(frame) - 1)
    assert out is not None
    assert bytes(protocol.decode_response(out, ApiKey.Fetch, 12).responses[0].partitions[0].records) == whole
