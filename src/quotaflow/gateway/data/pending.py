"""One request on its way through the gateway: what the connection, its API handlers and the event log share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from quotaflow.gateway.data import protocol
from quotaflow.gateway.data.enforcement import NO_DECISIONS, RequestDecisions
from quotaflow.gateway.data.mutations import TopicQuotaDecision

RAW_SASL: Final = -1  # pseudo api version marking a SaslHandshake-v0 raw token exchange


@dataclass(slots=True)
class Pending:
    """One request on its way through the gateway."""

    header: protocol.RequestHeader
    request_bytes: int
    received_ms: int
    thread_ns: int = 0  # event-loop time (and executor CPU time) spent on this request so far ("io thread")
    network_ns: int = 0  # event-loop time from taking its response to having written it ("network thread")
    acks: int | None = None
    local: bytes | None = None  # a response the gateway made itself
    forwarded: bool = False  # sent to the upstream, whose response it waits for (else answered here)
    reply: bytes | None = None  # the upstream's response, once read
    forward: bytes | None = None  # the frame to send upstream (once the upstream connection is there)
    local_api_versions: bool = False  # ApiVersions before SASL authentication: answered from the gateway's cache
    close_after: bool = False
    hold_then_close_ms: int = 0  # nothing is sent; the connection is held this long, then closed (KIP-612's way)
    holds_reading: bool = False  # a rate-limited produce: no further reads until its response + throttle
    # exempt from the request quota (Kafka's ClientRequestQuotaManager exemptions, KIP-124): its thread time goes
    # to the exempt-request-time sensor
    exempt: bool = False
    mutations: TopicQuotaDecision | None = None  # CreateTopics, CreatePartitions, DeleteTopics under KIP-599
    fetch_cap: int | None = None  # a Fetch under a consumer quota: the max_bytes it was capped to
    response: bytes | None = None  # the upstream response as answered, when cut before its decision (Fetch)
    # a Fetch response larger than the consumer quota's window holds: delivered with its throttle, not emptied
    oversized: bool = False
    decisions: RequestDecisions = NO_DECISIONS
    authz: Any = None  # the authorization plan (gateway.auth.authorize.Plan) when the request was rewritten or refused
    handler: Any = None  # its API's hooks (gateway.data.api_handlers.ApiHandler), looked up once when it was taken
