"""Controller-mutation quota (KIP-599) on CreateTopics, CreatePartitions and DeleteTopics: the gateway decides per
topic, the upstream does the rest.

Permits, as Kafka counts them: CreateTopics, the partitions a topic creates (its assignments, else
``num_partitions``; an unset ``-1`` counts as 1, the broker default of ``num.partitions``); CreatePartitions, the new
partitions (requested count minus the current count); DeleteTopics, the topic's partitions. The last two need the
upstream's partition counts, which :mod:`quotaflow.gateway.data.partition_counts` fetches just before the request is
decided; a topic that costs nothing (unknown to the upstream, or no new partitions) meets no quota and goes on to
the upstream, which answers it with its own error. The engine's token bucket decides.

Strict versions (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+, ``engine.is_strict``) refuse a topic
that does not fit with THROTTLING_QUOTA_EXCEEDED, though the first over-sized topic still passes, as Kafka's
check-then-record does; lower versions get the permissive quota: everything passes and only the throttle is kept.
Refused topics are cut out of the forwarded request and put back into the response. A ``validate_only`` request
records nothing (as ZkAdminManager).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from kafka.protocol.api_key import ApiKey

from quotaflow.core.errors import ThrottlingQuotaExceededError
from quotaflow.engine import ControllerMutationQuota
from quotaflow.gateway.wire import protocol

Counts = Callable[[str | None, uuid.UUID | None], int | None]
"""(topic name, topic id) -> current partition count, None when unknown."""
METERED_APIS: Final = frozenset({ApiKey.CreateTopics, ApiKey.CreatePartitions, ApiKey.DeleteTopics})
NEEDS_COUNTS: Final = frozenset({ApiKey.CreatePartitions, ApiKey.DeleteTopics})
_NO_ID: Final = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class Refused:
    name: str | None
    topic_id: uuid.UUID | None
    message: str


@dataclass(slots=True)
class TopicQuotaDecision:
    quota: ControllerMutationQuota
    refused: list[Refused] = field(default_factory=list)
    forward: bytes | None = None  # the request to send upstream (None: nothing left to do)


def permits(topic: Any) -> int:
    """A CreateTopics topic's permits."""
    if topic.assignments:
        return len(topic.assignments)
    return int(topic.num_partitions) if topic.num_partitions > 0 else 1


def _no_counts(_name: str | None, _topic_id: uuid.UUID | None) -> int | None:
    return None


def _items(request: Any, api_key: int, version: int) -> tuple[str, list[Any]]:
    """(the request's topic list attribute, its entries)."""
    if api_key == ApiKey.DeleteTopics and version < 6:
        return "topic_names", list(request.topic_names)
    return "topics", list(request.topics)


def _identity(item: Any) -> tuple[str | None, uuid.UUID | None]:
    if isinstance(item, str):
        return item, None
    topic_id = getattr(item, "topic_id", None)
    return item.name, None if topic_id == _NO_ID else topic_id


def _permits(api_key: int, item: Any, counts: Counts) -> int:
    if api_key == ApiKey.CreateTopics:
        return permits(item)
    current = counts(*_identity(item))
    if current is None:
        return 0
    if api_key == ApiKey.DeleteTopics:
        return current
    return max(int(item.count) - current, 0)


def count_requests(frame: bytes, header: protocol.RequestHeader) -> tuple[list[str], list[uuid.UUID]]:
    """The topic names and ids whose partition counts deciding this request needs (none for CreateTopics)."""
    if header.api_key not in NEEDS_COUNTS:
        return [], []
    request = protocol.decode_request(frame, header)
    names, ids = [], []
    for item in _items(request, header.api_key, header.api_version)[1]:
        name, topic_id = _identity(item)
        if name:
            names.append(name)
        elif topic_id is not None:
            ids.append(topic_id)
    return names, ids


def decide(frame: bytes, header: protocol.RequestHeader, quota: ControllerMutationQuota, now_ms: int,
           counts: Counts = _no_counts) -> TopicQuotaDecision:
    """Record each topic's permits in request order; refused topics leave the forwarded request."""
    decision = TopicQuotaDecision(quota, forward=frame)
    request = protocol.decode_request(frame, header)
    if getattr(request, "validate_only", False):
        return decision
    attr, items = _items(request, header.api_key, header.api_version)
    admitted = []
    for item in items:
        cost = _permits(header.api_key, item, counts)
        if cost == 0:  # an unknown topic, or no new partitions: the upstream answers it with its own error
            admitted.append(item)
            continue
        try:
            quota.record(cost, now_ms)
        except ThrottlingQuotaExceededError as e:
            decision.refused.append(Refused(*_identity(item), e.message or ThrottlingQuotaExceededError.description))
        else:
            admitted.append(item)
    if not decision.refused:
        return decision
    if not admitted:
        decision.forward = None
        return decision
    setattr(request, attr, admitted)
    decision.forward = protocol.encode_request(request, header)
    return decision


_RESULTS: Final = {ApiKey.CreateTopics: "topics", ApiKey.DeleteTopics: "responses", ApiKey.CreatePartitions: "results"}


def _refused_results(api_key: int, cls: Any, refused: list[Refused]) -> list[Any]:
    code = ThrottlingQuotaExceededError.errno
    if api_key == ApiKey.CreateTopics:
        return [cls.CreatableTopicResult(name=r.name, error_code=code, error_message=r.message, num_partitions=-1,
                                         replication_factor=-1, configs=None) for r in refused]
    if api_key == ApiKey.DeleteTopics:
        return [cls.DeletableTopicResult(name=r.name, topic_id=r.topic_id or _NO_ID, error_code=code,
                                         error_message=r.message) for r in refused]
    return [cls.CreatePartitionsTopicResult(name=r.name, error_code=code, error_message=r.message) for r in refused]


def local_response(api_key: int, version: int, correlation_id: int, refused: list[Refused]) -> bytes:
    """Every topic was refused: the gateway answers without the upstream."""
    cls = protocol.response_class(api_key, version)
    message = cls(throttle_time_ms=0, **{_RESULTS[api_key]: _refused_results(api_key, cls, refused)})
    return protocol.encode_response(message, version, correlation_id)


def merge_response(frame: bytes, api_key: int, version: int, refused: list[Refused], throttle_ms: int) -> bytes:
    """The upstream's response with the refused topics added and ``throttle_time_ms`` raised to the throttle."""
    message = protocol.decode_response(frame, api_key, version)
    if refused:
        cls = protocol.response_class(api_key, version)
        attr = _RESULTS[api_key]
        setattr(message, attr, [*getattr(message, attr), *_refused_results(api_key, cls, refused)])
    if protocol.has_throttle_field(message):
        message.throttle_time_ms = max(int(message.throttle_time_ms), throttle_ms)
    return protocol.encode_response(message, version, protocol.response_correlation_id(frame))
