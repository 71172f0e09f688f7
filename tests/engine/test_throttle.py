"""Produce / fetch throttle combination (KafkaApis)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from quotaflow.core import DEFAULT
from quotaflow.engine import (
    NOT_THROTTLED,
    ClientQuotaManager,
    QuotaType,
    ThrottleDecision,
    bandwidth_throttle,
    fetch_throttle,
    produce_throttle,
    request_throttle,
)

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


class _KeptSensor:
    """A caller that keeps the sensor ``recording_sensor`` gives it and records into it itself while the manager's
    ``generation`` is unchanged and the sensor has not expired (the rule the gateway's bound Produce path follows),
    then ends the decision with ``bandwidth_throttle``."""

    def __init__(self, produce: ClientQuotaManager) -> None:
        self.produce = produce
        self.kept: tuple[int, str, str, Any] | None = None

    def decide(self, user: str, client_id: str, size: int, now_ms: int) -> ThrottleDecision:
        m = self.produce
        kept = self.kept
        if kept is None or kept[0] != m.generation or kept[1:3] != (user, client_id) or (
                kept[3] is not None and now_ms - kept[3].last_record_ms > m.sensor_expiration_ms):
            kept = self.kept = (m.generation, user, client_id, m.recording_sensor(user, client_id, now_ms))
        sensor = kept[3]
        if sensor is None:
            return NOT_THROTTLED
        return bandwidth_throttle(m, user, client_id, sensor.record_and_throttle(size, now_ms), now_ms)


@pytest.mark.parametrize("seed", range(6))
def test_a_kept_sensor_decides_and_records_as_produce_throttle_does(seed: int) -> None:
    """Random produce traffic from two clients with quota changes (set, lowered, zero, removed: no quota at all),
    sensors expiring (idle over an hour, recreated on the next record or removed by the expiry task) in between:
    the kept sensor's decisions, and every reading of the manager after each step, are produce_throttle's."""
    rng = random.Random(seed)
    reference, request = ClientQuotaManager(QuotaType.PRODUCE), ClientQuotaManager(QuotaType.REQUEST)
    kept = _KeptSensor(ClientQuotaManager(QuotaType.PRODUCE))
    now = T
    throttled = 0
    for _ in range(600):
        step = rng.random()
        if step < 0.05:
            value = rng.choice([None, 0, 2_000, 20_000, 200_000])
            entity = rng.choice([("u", None), (None, "c1"), ("u", "c2"), (None, DEFAULT)])
            for m in (reference, kept.produce):
                m.update_quota(*entity, value)
        elif step < 0.08:
            now += rng.choice([3_600_000, 3_600_001, 3_700_000])  # idle: the sensors expire (or just do not)
            if rng.random() < 0.5:
                assert reference.expire_sensors(now) == kept.produce.expire_sensors(now)
        else:
            now += rng.randrange(0, 400)
            client_id = rng.choice(["c1", "c2"])
            size = rng.randrange(1, 4_000)
            expected = produce_throttle(reference, request, "u", client_id, size, 0, 1, now)
            assert kept.decide("u", client_id, size, now) == expected
            throttled += expected.throttle_ms > 0
        for client_id in ("c1", "c2"):
            for reading in ("metric_value", "throttle_time_avg"):
                a, b = (getattr(m, reading)("u", client_id, now) for m in (reference, kept.produce))
                assert a == b or (a is not None and b is not None and math.isnan(a) and math.isnan(b)), reading
        assert reference.delay_queue_size(now) == kept.produce.delay_queue_size(now)
        assert reference.sensor_count == kept.produce.sensor_count
    assert throttled > 0  # the traffic did meet its quotas


def test_the_generation_moves_when_a_kept_sensor_may_no_longer_be_the_one_recorded() -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE)
    assert m.recording_sensor("u", "c", T) is None  # no quota: nothing is recorded
    m.update_quota(None, DEFAULT, 500)
    g = m.generation
    sensor = m.recording_sensor("u", "c", T)
    assert sensor is not None and m.recording_sensor("u", "other", T) is not None
    assert m.generation == g  # first sensors: nothing kept is replaced
    assert m.recording_sensor("u", "c", T + 3_600_000) is sensor
    assert m.recording_sensor("u", "c", T + 7_200_001) is not sensor  # expired: replaced
    assert m.generation == g + 1
    assert m.expire_sensors(T + 20_000_000) == 2
    assert m.generation == g + 2
    m.update_quota("u", None, 100)
    assert m.generation == g + 3
