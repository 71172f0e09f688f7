"""gateway.wire.frame_facts in its two forms: the Cython-compiled module (built by ``make setup``) and the pure-Python
twin (the same source, executed as Python) read every frame alike, real and hostile; both agree with kafka-python."""

from __future__ import annotations

import struct
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from quotaflow.core.errors import InvalidRequestError
from quotaflow.gateway.wire import frame_facts, protocol
from quotaflow.gateway.wire.frame_facts import ACKS_UNREADABLE
from twins import assert_compiled, forms, pure_twin

PURE = pure_twin(frame_facts)
FORMS = forms(frame_facts)


def test_make_setup_built_the_compiled_form() -> None:
    assert_compiled(frame_facts)


def _read(module: ModuleType, frame: bytes) -> tuple:
    """``read_request``'s header fields and acks as one flat tuple."""
    fields, acks = module.read_request(frame, protocol.FLEXIBLE_FROM)
    return (*fields, acks)


def _outcome(module: ModuleType, frame: bytes) -> object:
    try:
        return _read(module, frame)
    except InvalidRequestError as e:
        return ("error", str(e))


def _produce(version: int, *, acks: int, transactional_id: str | None, client_id: str | None = "app-1") -> bytes:
    r = ProduceRequest[version]
    data = [r.TopicProduceData(name="orders", partition_data=[
        r.TopicProduceData.PartitionProduceData(index=0, records=b"r" * 64)])]
    kwargs = {"acks": acks, "timeout_ms": 1000, "topic_data": data}
    if version >= 3:
        kwargs["transactional_id"] = transactional_id
    message = r(**kwargs)
    message.with_header(correlation_id=0x7FFFFFF0, client_id=client_id)
    return bytes(message.encode(header=True))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("version", range(3, 10))
@pytest.mark.parametrize("transactional_id", [None, "", "tx-Ω"])
@pytest.mark.parametrize("acks", [-1, 0, 1])
def test_produce_facts_match_kafka_python(form: ModuleType, version: int, transactional_id: str | None,
                                          acks: int) -> None:
    frame = _produce(version, acks=acks, transactional_id=transactional_id)
    key, v, correlation_id, client_id, end, body, got_acks = _read(form, frame)
    assert (key, v, correlation_id, client_id, got_acks) == (ApiKey.Produce, version, 0x7FFFFFF0, "app-1", acks)
    assert end == 10 + len(b"app-1")
    assert body == end + (1 if version >= 9 else 0)  # an empty tagged-field section on flexible versions
    decoded = ProduceRequest.decode(frame, version=version, header=True)
    assert decoded.acks == got_acks


@pytest.mark.parametrize("form", FORMS)
def test_signed_fields_and_null_client_id(form: ModuleType) -> None:
    frame = struct.pack(">hhih", 3, 1, -5, -1) + b"\x00\x00\x00\x00"
    assert _read(form, frame) == (3, 1, -5, None, 10, 10, ACKS_UNREADABLE)
    frame = struct.pack(">hhih", -1, -2, -(2**31), 0)
    assert _read(form, frame)[:5] == (-1, -2, -(2**31), "", 10)


@pytest.mark.parametrize("form", FORMS)
def test_header_tagged_fields_are_skipped(form: ModuleType) -> None:
    """A flexible header with two tagged fields (one of a 2-byte varint size): the body starts after them."""
    header = struct.pack(">hhih", ApiKey.Metadata, 12, 9, 1) + b"c"
    tags = b"\x02" + b"\x00\x03abc" + b"\x05\x80\x01" + b"x" * 128
    frame = header + tags + b"\x01\x01\x00"
    assert _read(form, frame)[5] == len(header) + len(tags)
    assert _read(form, header + tags[:-1])[5] == -1  # a tag running past the end


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("frame, message", [
    (b"\x00" * 9, "request frame of 9 bytes is shorter than a request header"),
    (struct.pack(">hhih", 3, 1, 1, 5) + b"abc", "client_id runs past the end of the request frame"),
    (struct.pack(">hhih", 3, 1, 1, 2) + b"\xff\xfe", "client_id is not UTF-8"),
])
def test_unreadable_headers_are_refused(form: ModuleType, frame: bytes, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        _read(form, frame)


def test_every_truncation_of_real_frames_reads_alike() -> None:
    frames = [_produce(v, acks=1, transactional_id="t") for v in (3, 8, 9)]
    metadata = MetadataRequest[12](topics=None, allow_auto_topic_creation=False,
                                   include_topic_authorized_operations=False)
    metadata.with_header(correlation_id=1, client_id="m")
    frames.append(bytes(metadata.encode(header=True)))
    for frame in frames:
        for cut in range(len(frame) + 1):
            assert _outcome(frame_facts, frame[:cut]) == _outcome(PURE, frame[:cut]), cut


@settings(max_examples=400, deadline=None)
@given(st.binary(min_size=0, max_size=80), st.sampled_from([0, 3, 9, 18]), st.integers(-1, 12))
def test_random_frames_read_alike(tail: bytes, key: int, version: int) -> None:
    frame = struct.pack(">hhi", key, version, 7) + tail
    assert _outcome(frame_facts, frame) == _outcome(PURE, frame)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=12))
def test_response_correlation_ids_read_alike(frame: bytes) -> None:
    expected = struct.unpack_from(">i", frame)[0] if len(frame) >= 4 else -1
    assert frame_facts.correlation_id(frame) == PURE.correlation_id(frame) == expected


def test_flexible_table_matches_kafka_python() -> None:
    for key, cls in protocol.REQUESTS.items():
        for version in range(int(cls.max_version) + 3):
            assert protocol.is_flexible(key, version) == bool(cls.flexible_version_q(version)), (key, version)


# -- topic names of a Produce or Fetch ------------------------------------------------------------------------------

def _fetch_partition_size(version: int) -> int:
    return 4 + (4 if version >= 9 else 0) + 8 + (4 if version >= 12 else 0) + (8 if version >= 5 else 0) + 4


def _topics_frame(key: int, version: int, names: list[str], transactional_id: str | None = None) -> bytes:
    """A Produce (three partitions a topic, records of different sizes) or Fetch naming ``names``."""
    cls = protocol.REQUESTS[key][version]
    if key == ApiKey.Produce:
        part = cls.TopicProduceData.PartitionProduceData
        fields: dict[str, object] = {"acks": -1, "timeout_ms": 5, "topic_data": [cls.TopicProduceData(
            name=n, partition_data=[part(index=p, records=b"x" * (7 + 50 * p)) for p in range(3)]) for n in names]}
        if version >= 3:
            fields["transactional_id"] = transactional_id
    else:
        fp = cls.FetchTopic.FetchPartition
        fields = {"replica_id": -1, "max_wait_ms": 1, "min_bytes": 1, "max_bytes": 9, "isolation_level": 0,
                  "session_id": 0, "session_epoch": 0, "rack_id": "r", "forgotten_topics_data": [
                      cls.ForgottenTopic(topic="gone", partitions=[1])],
                  "topics": [cls.FetchTopic(topic=n, partitions=[fp(partition=p, current_leader_epoch=-1,
                                                                     fetch_offset=3, log_start_offset=-1,
                                                                     partition_max_bytes=9) for p in range(3)])
                             for n in names]}
    message = cls(**fields)
    message.with_header(correlation_id=1, client_id="c")
    return bytes(message.encode(header=True))


def _names(module: ModuleType, key: int, frame: bytes, version: int) -> object:
    """A form's reading of a frame's topic names (or its refusal), as ``gateway.auth.topic_names`` asks it."""
    try:
        body = module.read_request(frame, protocol.FLEXIBLE_FROM)[0][5]
        if key == ApiKey.Produce:
            return module.produce_topic_names(frame, body, version >= 9)
        fetch_head = 4 + 4 + 4 + 4 + 1 + (8 if version >= 7 else 0)
        return module.fetch_topic_names(frame, body + fetch_head, version >= 12, _fetch_partition_size(version))
    except InvalidRequestError:
        return "refused"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("key", "versions"), [(ApiKey.Produce, range(3, 10)), (ApiKey.Fetch, range(4, 13))])
def test_topic_names_match_kafka_python(form: ModuleType, key: int, versions: range) -> None:
    for version in versions:
        for names, transactional_id in ((["a"], None), (["orders", "Ω-topic", "b" * 249], "tx-1"), ([], "")):
            frame = _topics_frame(key, version, names, transactional_id)
            decoded = protocol.decode_request(frame, protocol.parse_request_header(frame))
            if key == ApiKey.Produce:
                expected: object = (decoded.transactional_id if version >= 3 else None,
                                    [t.name for t in decoded.topic_data])
            else:
                expected = [t.topic for t in decoded.topics]
            assert _names(form, key, frame, version) == expected, (version, names)


def test_every_truncation_and_corruption_of_topic_frames_reads_alike() -> None:
    """Both forms refuse or read alike every prefix of real Produce and Fetch frames, and every single-byte change
    of them; a refusal is the only outcome of a frame cut before its last topic."""
    for key, versions in ((ApiKey.Produce, (3, 8, 9)), (ApiKey.Fetch, (4, 11, 12))):
        for version in versions:
            frame = _topics_frame(key, version, ["orders", "pay"], "tx")
            for cut in range(len(frame)):
                assert _names(frame_facts, key, frame[:cut], version) == _names(PURE, key, frame[:cut], version)
            for i in range(10, len(frame)):
                for value in (0x00, 0x7F, 0x80, 0xFF):
                    bad = frame[:i] + bytes([value]) + frame[i + 1:]
                    assert _names(frame_facts, key, bad, version) == _names(PURE, key, bad, version), (i, value)
            inside_last_topic = frame.index(b"pay") + 5  # its partitions cut short
            assert _names(frame_facts, key, frame[:inside_last_topic], version) == "refused"


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=64), st.booleans(), st.integers(0, 70))
def test_random_topic_sections_read_alike(data: bytes, flexible: bool, pos: int) -> None:
    for module in (frame_facts, PURE):
        assert module.COMPILED is (module is frame_facts)
    def outcome(module: ModuleType) -> object:
        try:
            return (module.produce_topic_names(data, pos, flexible),
                    module.fetch_topic_names(data, pos, flexible, 29))
        except InvalidRequestError:
            return "refused"
    assert outcome(frame_facts) == outcome(PURE)
