"""Produce / fetch throttle combination (KafkaApis)."""

from __future__ import annotations

from quotaflow.engine import ClientQuotaManager, QuotaType, fetch_throttle, produce_throttle, request_throttle

T = 1_000_000


def managers() -> tuple[ClientQuotaManager, ClientQuotaManager, ClientQuotaManager]:
    return ClientQuotaManager(QuotaType.PRODUCE), ClientQuotaManager(QuotaType.FETCH), \
        ClientQuotaManager(QuotaType.REQUEST)


def test_fetch_unrecords_when_only_request_throttles() -> None:
    _, fetch, request = managers()
    fetch.update_quota("u", None, 1_000_000)
    request.update_quota("u", None, 1)
    d = fetch_throttle(fetch, request, "u", "c", 1000, 500_000_000, T)
    assert d.bandwidth_ms == 0 and d.request_ms == 1000 and d.throttle_ms == 1000 and d.by_request
    assert fetch.metric_value("u", "c", T) == 0  # the empty response's bytes were un-recorded
    assert request.delay_queue_size(T) == 1 and fetch.delay_queue_size(T) == 0


def test_fetch_bandwidth_throttle() -> None:
    _, fetch, request = managers()
    fetch.update_quota("u", None, 100)  # the window holds 100 x (11 - 1) x 1 s = 1000 bytes
    assert fetch_throttle(fetch, request, "u", "c", 800, 0, T).throttle_ms == 0
    d = fetch_throttle(fetch, request, "u", "c", 800, 0, T)
    assert d.throttle_ms == d.bandwidth_ms == 1000 * 10 * (1600 / 10 - 100) / 100
    assert not d.by_request and not d.oversized
    assert fetch.metric_value("u", "c", T) == 80  # the throttled (empty) response's bytes were un-recorded
    assert fetch.delay_queue_size(T) == 1


def test_a_fetch_larger_than_the_window_is_delivered_once_then_waits_for_the_quota() -> None:
    """Kafka would empty and un-record it forever (it can never fit the window): delivered and throttled after,
    its bytes kept, when the consumer was within its quota; then nothing until its rate is back within it."""
    _, fetch, request = managers()
    fetch.update_quota("u", None, 100)
    d = fetch_throttle(fetch, request, "u", "c", 2000, 0, T)
    assert d.throttle_ms == d.bandwidth_ms == 1000 * 10 * (2000 / 10 - 100) / 100 and d.oversized
    assert fetch.metric_value("u", "c", T) == 200  # kept recorded, as a produce request's bytes are
    # another connection of the same consumer, over its quota now: Kafka's rule again (empty, un-recorded)
    again = fetch_throttle(fetch, request, "u", "c", 2000, 0, T + 5_000)
    assert again.throttle_ms > 0 and not again.oversized
    assert fetch.metric_value("u", "c", T + 5_000) == 200
    # once the first response has left the window, the consumer is within its quota: the next one is delivered
    later = fetch_throttle(fetch, request, "u", "c", 2000, 0, T + 12_000)
    assert later.oversized and fetch.metric_value("u", "c", T + 12_000) == 200


def test_produce_acks0_is_exempt_from_request_quota() -> None:
    produce, _, request = managers()
    produce.update_quota("u", None, 100)
    request.update_quota("u", None, 1)
    d = produce_throttle(produce, request, "u", "c", 2000, 500_000_000, 0, T)
    assert d.request_ms == 0 and d.bandwidth_ms > 0
    assert produce.metric_value("u", "c", T) == 200  # produce bytes are never un-recorded
    assert request.exempt is not None and request.exempt.measure(T) > 0
    d1 = produce_throttle(produce, request, "u", "c", 0, 500_000_000, 1, T)
    assert d1.request_ms == 1000


def test_request_throttle_applies() -> None:
    *_, request = managers()
    request.update_quota(None, "c", 1)
    assert request_throttle(request, "u", "c", 500_000_000, T) == 1000
    assert request.throttle_time_avg("u", "c", T) == 1000
