"""Kafka wire protocol glue over kafka-python 3.0.12's schema-driven message classes.

Every request and response body the gateway reads or writes is decoded and encoded by kafka-python's generated
``ApiMessage`` classes (built from Kafka's own JSON message definitions); quotaflow keeps no schema tables. The only
bytes parsed by hand are the four fields every request header v1/v2 starts with (api key, version, correlation id,
client id: fixed positions in both versions) and, for Produce, the walk to ``acks``: both on the hot path, where a
full decode would cost more than forwarding the bytes.

Header rules: request header v2 (tagged fields) iff the request version is flexible, else v1; response header v1
iff the response version is flexible, else v0, except ApiVersions whose response header is always v0 (KIP-511).
"""

from __future__ import annotations

import struct
from typing import Any, Final, NamedTuple

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer
import kafka.protocol.sasl  # noqa: F401  (registers the SASL message classes)
from kafka.protocol.api_key import ApiKey
from kafka.protocol.api_message import ApiMessage

from quotaflow.core.errors import InvalidRequestError
from quotaflow.gateway.wire import frame_facts
from quotaflow.gateway.wire.frame_facts import ACKS_UNREADABLE

_INT16: Final = struct.Struct(">h")
INT16: Final = _INT16
_INT32: Final = struct.Struct(">i")
SIZE: Final = _INT32
BODY_UNREAD: Final = -2  # RequestHeader.body of a header made by hand: read from the frame when needed


def _message_classes() -> tuple[dict[int, type[ApiMessage]], dict[int, type[ApiMessage]]]:
    requests: dict[int, type[ApiMessage]] = {}
    responses: dict[int, type[ApiMessage]] = {}
    todo = list(ApiMessage.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is not None or getattr(cls, "_json", None) is None:
            continue  # a per-version wrapper, or an abstract base
        key = int(cls.API_KEY)
        (requests if cls.is_request() else responses)[key] = cls
    return requests, responses


REQUESTS, RESPONSES = _message_classes()


def api_name(api_key: int) -> str:
    try:
        return str(ApiKey(api_key).name)
    except ValueError:
        return f"Unknown({api_key})"


def max_known_version(api_key: int) -> int | None:
    """The highest version kafka-python can decode for both request and response, or None if it cannot."""
    req, resp = REQUESTS.get(api_key), RESPONSES.get(api_key)
    if req is None or resp is None:
        return None
    return min(int(req.max_version), int(resp.max_version))


def is_flexible(api_key: int, version: int) -> bool:
    return 0 <= api_key < len(FLEXIBLE_FROM) and version >= 0 and version >= FLEXIBLE_FROM[api_key]


def _flexible_from() -> bytes:
    """The first flexible version of every API kafka-python models, indexed by API key (255: never), for
    ``frame_facts.read_request``; every API's flexible versions are "N+" in Kafka's message definitions."""
    table = bytearray(b"\xff" * (max(REQUESTS) + 1))
    for key, cls in REQUESTS.items():
        table[key] = next((v for v in range(int(cls.max_version) + 1) if cls.flexible_version_q(v)), 255)
    return bytes(table)


FLEXIBLE_FROM: Final = _flexible_from()


class RequestHeader(NamedTuple):
    """The request-header fields that sit at fixed offsets in v1 and v2, and where the body starts."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    end: int  # offset just after client_id (tagged header fields follow when flexible)
    body: int = BODY_UNREAD  # offset of the body; -1: the header's tagged fields are malformed


def read_request(frame: bytes | memoryview) -> tuple[RequestHeader, int]:
    """The header of a request frame and, for a Produce, its ``acks`` (else ``ACKS_UNREADABLE``), read in one call
    (``frame_facts``). Raise ``InvalidRequestError`` if the frame is too short for its header."""
    if type(frame) is not bytes:  # the compiled reader takes bytes (frames cut by FrameBuffer are)
        frame = bytes(frame)
    return frame_facts.read_request(frame, FLEXIBLE_FROM, RequestHeader)  # made there: no NamedTuple __new__


def parse_request_header(frame: bytes | memoryview) -> RequestHeader:
    """Raise ``InvalidRequestError`` if the frame is too short for its header."""
    return read_request(frame)[0]


def body_offset(frame: bytes | memoryview, header: RequestHeader) -> int:
    """Where the request body starts: after client_id, and after the header's tagged fields when flexible."""
    body = header.body
    if body == BODY_UNREAD:  # a header made by hand
        body = read_request(frame)[0].body if len(frame) >= 10 else -1
    if body < 0:
        raise InvalidRequestError("request header runs past the end of the frame")
    return body


def produce_acks(frame: bytes | memoryview, header: RequestHeader) -> int:
    """``acks`` of a Produce request: skip ``transactional_id`` (v3+) and read the int16 that follows."""
    acks = read_request(frame)[1]
    if acks == ACKS_UNREADABLE:
        raise InvalidRequestError("Produce request too short for acks")
    return acks


def decode_request(frame: bytes, header: RequestHeader) -> Any:
    """The decoded request body (a kafka-python ``ApiMessage``). Raise ``InvalidRequestError`` when it cannot be."""
    cls = REQUESTS.get(header.api_key)
    if cls is None or not 0 <= header.api_version <= cls.max_version:
        raise InvalidRequestError(f"cannot decode {api_name(header.api_key)} v{header.api_version}")
    try:
        return cls.decode(frame, version=header.api_version, header=True)
    except Exception as e:  # kafka-python raises assorted errors on malformed input
        raise InvalidRequestError(f"malformed {api_name(header.api_key)} v{header.api_version} request: {e}") from e


def encode_request(message: Any, header: RequestHeader) -> bytes:
    """A decoded request re-encoded (unframed) under its own header: same version, correlation id, client id."""
    message._header = None
    message.API_VERSION = header.api_version
    message.with_header(correlation_id=header.correlation_id, client_id=header.client_id)
    return bytes(message.encode(header=True))


def response_class(api_key: int, version: int) -> Any:
    cls = RESPONSES.get(api_key)
    if cls is None or not 0 <= version <= cls.max_version:
        raise InvalidRequestError(f"cannot encode {api_name(api_key)} v{version} responses")
    return cls[version]


def decode_response(frame: bytes, api_key: int, version: int) -> Any:
    """A response frame (without the size prefix) from the upstream, header included."""
    return RESPONSES[api_key].decode(frame, version=version, header=True)


def encode_response(message: Any, version: int, correlation_id: int) -> bytes:
    """The framed response (size prefix, header, body) for ``message`` at ``version``."""
    message._header = None  # a decoded message carries the upstream's header; the version setter would touch it
    message.API_VERSION = version
    message.with_header(correlation_id=correlation_id)
    return bytes(message.encode(header=True, framed=True))


def response_correlation_id(frame: bytes | memoryview) -> int:
    cid: int = _INT32.unpack_from(frame, 0)[0]
    return cid


def set_throttle(frame: bytes, api_key: int, version: int, throttle_ms: int) -> bytes | None:
    """Re-encode a response with ``throttle_time_ms = max(upstream's, throttle_ms)``; returns the framed bytes, or
    None when this response version has no throttle field (or kafka-python cannot decode it): the connection is
    still muted, the client just is not told."""
    if max_known_version(api_key) is None:
        return None
    try:
        message = decode_response(frame, api_key, version)
    except Exception:
        return None
    if not has_throttle_field(message):
        return None
    message.throttle_time_ms = max(int(message.throttle_time_ms), throttle_ms)
    return encode_response(message, version, response_correlation_id(frame))


def has_throttle_field(message: Any) -> bool:
    field = message._struct.fields.get("throttle_time_ms")
    return field is not None and bool(field.for_version_q(message.API_VERSION))


def throttle_of(frame: bytes, api_key: int, version: int) -> int:
    """The upstream's own ``throttle_time_ms`` in a response (0 when absent or undecodable)."""
    try:
        message = decode_response(frame, api_key, version)
    except Exception:
        return 0
    return int(message.throttle_time_ms) if has_throttle_field(message) else 0


def empty_fetch_response(frame: bytes, version: int, throttle_ms: int) -> bytes:
    """As ``KafkaApis``: a throttled fetch gets no data (error NONE, same fetch session), throttle attached."""
    upstream = decode_response(frame, ApiKey.Fetch, version)
    fields: dict[str, Any] = {"throttle_time_ms": max(throttle_ms, int(getattr(upstream, "throttle_time_ms", 0))),
                              "responses": []}
    if version >= 7:
        fields["error_code"] = 0
        fields["session_id"] = upstream.session_id
    message = response_class(ApiKey.Fetch, version)(**fields)
    return encode_response(message, version, response_correlation_id(frame))


def fetch_max_bytes_offset(frame: bytes | memoryview, header: RequestHeader) -> int | None:
    """Where a Fetch request's top-level ``max_bytes`` (int32, v3+) sits: after ``replica_id`` (v3-14),
    ``max_wait_ms`` and ``min_bytes``. None before v3 (no such field). Read and patched in place, so capping it
    costs no decode."""
    if header.api_version < 3:
        return None
    pos = body_offset(frame, header) + (8 if header.api_version >= 15 else 12)
    if pos + 4 > len(frame):
        raise InvalidRequestError("Fetch request too short for max_bytes")
    return pos


def cap_fetch_max_bytes(frame: bytes, header: RequestHeader, cap: int) -> bytes:
    """The Fetch request with ``max_bytes = min(max_bytes, cap)`` (the same bytes when already within it)."""
    pos = fetch_max_bytes_offset(frame, header)
    if pos is None or _INT32.unpack_from(frame, pos)[0] <= cap:
        return frame
    out = bytearray(frame)
    _INT32.pack_into(out, pos, cap)
    return bytes(out)


_BATCH_HEAD: Final = struct.Struct(">qi")  # base offset, length: the framing of every record batch / message set


def whole_batches(records: bytes | memoryview, budget: int, keep_first: bool) -> int:
    """How many leading bytes of a partition's ``records`` are whole record batches fitting ``budget`` (each batch,
    whatever its magic, is ``offset int64, length int32, length bytes``); with ``keep_first`` the first batch is
    kept even if it alone is larger (KIP-74). A partial batch at the end (Kafka may cut one) is never counted."""
    pos, end = 0, len(records)
    while pos + _BATCH_HEAD.size <= end:
        size = _BATCH_HEAD.size + _BATCH_HEAD.unpack_from(records, pos)[1]
        if size <= _BATCH_HEAD.size or pos + size > end or (pos + size > budget and not (keep_first and pos == 0)):
            break
        pos += size
    return pos


def trim_fetch_response(frame: bytes, version: int, max_bytes: int) -> bytes | None:
    """A Fetch response (unframed, header included) cut to at most ``max_bytes`` in whole record batches, as a
    Kafka broker answers (``ReplicaManager``: partitions in order, each taking batches while the response's
    budget lasts, the first batch of the first partition with data always, KIP-74); the partitions cut keep their
    watermarks and error codes and are fetched again from the same offset. The budget counts the whole response,
    so that a trimmed response fits the limit the consumer quota set. None when nothing had to be cut."""
    message = decode_response(frame, ApiKey.Fetch, version)
    partitions = [p for topic in message.responses for p in topic.partitions]
    sizes = [len(p.records) if p.records is not None else 0 for p in partitions]
    budget = max_bytes - (len(frame) - sum(sizes))  # what the records may take beside the response's own fields
    used, cut, first = 0, False, True
    for p, size in zip(partitions, sizes, strict=True):
        if not size:
            continue
        keep = whole_batches(p.records, budget - used, first)
        first = False
        if keep < size:
            p.records = bytes(memoryview(p.records)[:keep])
            cut = True
        used += keep
    if not cut:
        return None
    return encode_response(message, version, response_correlation_id(frame))[SIZE.size:]
