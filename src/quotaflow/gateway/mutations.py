"""Controller-mutation quota (KIP-599) on CreateTopics: the gateway decides per topic, the upstream creates the rest.

Each topic asks for as many permits as it creates partitions: its assignments, else ``num_partitions`` (an unset
``-1`` counts as 1, the broker default of ``num.partitions``). The engine's token bucket decides. CreateTopics v6+
gets the strict quota (``engine.is_strict``): a topic that does not fit is refused with THROTTLING_QUOTA_EXCEEDED,
though the first over-sized topic still passes, as Kafka's check-then-record does. Lower versions get the
permissive quota: everything passes and only the throttle is kept. Refused topics are cut out of the forwarded
request and put back into the response. A ``validate_only`` request records nothing (as ZkAdminManager).
DeleteTopics and CreatePartitions are not metered: their permit counts need the upstream's partition counts
(docs/gateway.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.api_key import ApiKey

from quotaflow.core.errors import ThrottlingQuotaExceededError
from quotaflow.engine import ControllerMutationQuota
from quotaflow.gateway import protocol


@dataclass(slots=True)
class TopicQuotaDecision:
    quota: ControllerMutationQuota
    refused: list[tuple[str, str]] = field(default_factory=list)  # (topic, error message)
    forward: bytes | None = None  # the request to send upstream (None: nothing left to create)


def permits(topic: Any) -> int:
    if topic.assignments:
        return len(topic.assignments)
    return int(topic.num_partitions) if topic.num_partitions > 0 else 1


def decide(frame: bytes, header: protocol.RequestHeader, quota: ControllerMutationQuota,
           now_ms: int) -> TopicQuotaDecision:
    """Record each topic's permits in request order; refused topics leave the forwarded request."""
    decision = TopicQuotaDecision(quota, forward=frame)
    request = protocol.decode_request(frame, header)
    if request.validate_only:
        return decision
    admitted = []
    for topic in request.topics:
        try:
            quota.record(permits(topic), now_ms)
        except ThrottlingQuotaExceededError as e:
            decision.refused.append((topic.name, e.message or ThrottlingQuotaExceededError.description))
        else:
            admitted.append(topic)
    if not decision.refused:
        return decision
    if not admitted:
        decision.forward = None
        return decision
    request.topics = admitted
    decision.forward = protocol.encode_request(request, header)
    return decision


def _refused_results(cls: Any, refused: list[tuple[str, str]]) -> list[Any]:
    result = cls.CreatableTopicResult
    return [result(name=name, error_code=ThrottlingQuotaExceededError.errno, error_message=message,
                   num_partitions=-1, replication_factor=-1, configs=None) for name, message in refused]


def local_response(version: int, correlation_id: int, refused: list[tuple[str, str]]) -> bytes:
    """Every topic was refused: the gateway answers without the upstream."""
    cls = protocol.response_class(ApiKey.CreateTopics, version)
    return protocol.encode_response(cls(throttle_time_ms=0, topics=_refused_results(cls, refused)), version,
                                    correlation_id)


def merge_response(frame: bytes, version: int, refused: list[tuple[str, str]], throttle_ms: int) -> bytes:
    """The upstream's response with the refused topics added and ``throttle_time_ms`` raised to the throttle."""
    message = protocol.decode_response(frame, ApiKey.CreateTopics, version)
    if refused:
        cls = protocol.response_class(ApiKey.CreateTopics, version)
        message.topics = [*message.topics, *_refused_results(cls, refused)]
    if protocol.has_throttle_field(message):
        message.throttle_time_ms = max(int(message.throttle_time_ms), throttle_ms)
    return protocol.encode_response(message, version, protocol.response_correlation_id(frame))
