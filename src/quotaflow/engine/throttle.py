"""How several managers' throttles combine into the one a response carries (``KafkaApis``).

Produce records bandwidth first, then request time (none for acks=0, which is exempt); fetch records request time
first, then bandwidth, and un-records the fetch bytes when the response is throttled (an empty response is sent),
unless the response is larger than the quota window can ever hold (:func:`fetch_throttle`).
The applied throttle is ``max(bandwidth, request)``; the throttle-time sensor and delay queue of the manager that
gave the larger value record it (request on a tie). The gateway and the pipeline use these, not their own copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from quotaflow.engine.client_quota import ClientQuotaManager
from quotaflow.engine.quota_utils import to_int32


@dataclass(frozen=True, slots=True)
class ThrottleDecision:
    """The applied throttle and its two parts."""

    throttle_ms: int
    bandwidth_ms: int
    request_ms: int
    oversized: bool = False  # a fetch response larger than the quota window holds: delivered, recorded, throttled

    @property
    def by_request(self) -> bool:
        """Whether the request quota is the one applied (it wins ties)."""
        return self.request_ms >= self.bandwidth_ms


NOT_THROTTLED = ThrottleDecision(0, 0, 0)


def combine(bandwidth_ms: int, request_ms: int) -> ThrottleDecision:
    if not bandwidth_ms and not request_ms:  # the common case: one shared instance, nothing to build
        return NOT_THROTTLED
    return ThrottleDecision(max(bandwidth_ms, request_ms), bandwidth_ms, request_ms)


def _apply(decision: ThrottleDecision, bandwidth: ClientQuotaManager, request: ClientQuotaManager, user: str,
           client_id: str, now_ms: int) -> None:
    if decision.throttle_ms > 0:
        winner = request if decision.by_request else bandwidth
        winner.throttle(user, client_id, decision.throttle_ms, now_ms)


def produce_throttle(produce: ClientQuotaManager, request: ClientQuotaManager, user: str, client_id: str,
                     size_bytes: int, thread_ns: int, acks: int, now_ms: int, *,
                     apply: bool = True) -> ThrottleDecision:
    """A produce request: bandwidth with the check, then request time (exempt for acks=0)."""
    bw = produce.record_and_get_throttle_ms(user, client_id, size_bytes, now_ms)
    req = 0
    if request.quotas_enabled:  # (asked here: no call into a manager that would record nothing)
        if acks == 0:
            request.record_exempt_ns(thread_ns, now_ms)
        else:
            req = request.record_request_time_ns(user, client_id, thread_ns, now_ms)
    if not bw and not req:  # combine's common case, without the call
        return NOT_THROTTLED
    decision = combine(bw, req)
    if apply:
        _apply(decision, produce, request, user, client_id, now_ms)
    return decision


def bandwidth_throttle(bandwidth: ClientQuotaManager, user: str, client_id: str, throttle_ms: int, now_ms: int,
                       ) -> ThrottleDecision:
    """The rest of :func:`produce_throttle` once its bandwidth throttle is known and nothing else is recorded (no
    request quota in force, so request time records nothing): for a caller that recorded the bytes into the sensor
    itself (``ClientQuotaManager.recording_sensor``); ``throttle_ms`` is the sensor's raw throttle, as Kafka's long."""
    bw = to_int32(throttle_ms)  # the manager's throttleTime(...).toInt
    if not bw:
        return NOT_THROTTLED
    decision = combine(bw, 0)
    if decision.throttle_ms > 0:  # the bandwidth quota's throttle is the one applied
        bandwidth.throttle(user, client_id, decision.throttle_ms, now_ms)
    return decision


def fetch_throttle(fetch: ClientQuotaManager, request: ClientQuotaManager, user: str, client_id: str,
                   response_bytes: int, thread_ns: int, now_ms: int, *, apply: bool = True) -> ThrottleDecision:
    """A consumer fetch: request time, then bandwidth; a throttled response is empty, so its bytes are
    un-recorded (Kafka's rule). One departure, so that a consumer always makes progress: a response larger than
    the quota window holds, from a consumer within its quota before it (:func:`~quotaflow.engine.rate.
    keeps_oversized_fetch`), is delivered and throttled after, its bytes kept recorded (``oversized``)."""
    req = request.record_request_time_ns(user, client_id, thread_ns, now_ms)
    bw = fetch.record_and_get_throttle_ms(user, client_id, response_bytes, now_ms)
    decision = combine(bw, req)
    if decision.throttle_ms > 0:
        if fetch.keeps_oversized(user, client_id, response_bytes, now_ms):
            decision = ThrottleDecision(decision.throttle_ms, bw, req, oversized=True)
        else:
            fetch.unrecord(user, client_id, response_bytes, now_ms)
    if apply:
        _apply(decision, fetch, request, user, client_id, now_ms)
    return decision


def request_throttle(request: ClientQuotaManager, user: str, client_id: str, thread_ns: int, now_ms: int, *,
                     apply: bool = True) -> int:
    """Any other throttled request: io-thread time with the check (capped at one window)."""
    ms = request.record_request_time_ns(user, client_id, thread_ns, now_ms)
    if apply and ms > 0:
        request.throttle(user, client_id, ms, now_ms)
    return ms
