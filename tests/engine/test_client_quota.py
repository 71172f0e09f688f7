"""ClientQuotaManagerTest (TEST-CASES §3) against the produce manager, 11 × 1 s windows."""

from __future__ import annotations

import pytest

from quotaflow.core import DEFAULT
from quotaflow.core.entities import Part
from quotaflow.core.keys import UNLIMITED
from quotaflow.engine import ClientQuotaManager, QuotaId, QuotaType
from quotaflow.engine.client_quota import DOUBLE_MAX

T = 1_000_000


def produce(tracking: str = "monotonic", samples: int = 11) -> ClientQuotaManager:
    return ClientQuotaManager(QuotaType.PRODUCE, samples=samples, window_seconds=1,
                              quota_types_tracking=tracking)  # type: ignore[arg-type]


def check_quota(m: ClientQuotaManager, user: str, client: str, bound: float, value: float, throttled: bool) -> int:
    """Kafka's checkQuota helper: bound, max value in the window, then a record of value × 11 at T."""
    assert m.quota_limit(user, client) == bound
    expected_max = DOUBLE_MAX if bound == UNLIMITED else (m.samples - 1) * m.window_seconds * bound
    assert m.max_value_in_quota_window(user, client) == expected_max
    ms = m.record_and_get_throttle_ms(user, client, value * 11, T)
    assert (ms > 0) == throttled
    return ms


Entity = tuple[Part, Part]
VARIANTS: list[tuple[str, Entity, Entity, Entity, str, str]] = [
    # name, config for c1, config for c2, default entity, request user, request client
    ("client-id", (None, "p1"), (None, "p2"), (None, DEFAULT), "ANONYMOUS", "p1"),
    ("user", ("User1", None), ("User2", None), (DEFAULT, None), "User1", "p1"),
    ("user+client", ("User1", "p1"), ("User2", "p2"), (DEFAULT, DEFAULT), "User1", "p1"),
]


@pytest.mark.parametrize(("name", "c1", "c2", "default", "user", "client"), VARIANTS)
def test_quota_parsing(name: str, c1: Entity, c2: Entity, default: Entity, user: str, client: str) -> None:
    m = produce()
    m.update_quota(*c1, 2000)
    m.update_quota(*c2, 4000)
    assert m.quota_limit("RandomUser", "random-client-id") == UNLIMITED
    other_user = "User2" if c2[0] == "User2" else "ANONYMOUS"
    assert m.quota_limit(other_user, "p2") == 4000
    assert check_quota(m, user, client, 2000, 2500, True) == 3750
    m.update_quota(*c1, 3000)
    assert check_quota(m, user, client, 3000, 0, False) == 0
    m.update_quota(*c1, 500)
    assert check_quota(m, user, client, 500, 0, True) == 45000
    m.update_quota(*c1, None)
    m.update_quota(*default, 4000)
    assert check_quota(m, user, client, 4000, 1000, False) == 0


def test_max_value_in_quota_window_with_non_default_window() -> None:
    m = produce(samples=4)
    assert m.max_value_in_quota_window("ANONYMOUS", "c") == DOUBLE_MAX
    m.update_quota(DEFAULT, None, 10)
    assert m.max_value_in_quota_window("ANONYMOUS", "c") == 30


@pytest.mark.parametrize("entity", [(DEFAULT, None), ("userA", None), ("userA", "client1")])
def test_set_and_remove_quota(entity: Entity) -> None:
    m = produce()
    assert check_quota(m, "userA", "client1", UNLIMITED, 1000, False) == 0
    assert m.sensor_count == 0  # nothing recorded while no quota exists
    m.update_quota(*entity, 10)
    assert check_quota(m, "userA", "client1", 10, 1000, True) == 1_090_000
    m.update_quota(*entity, None)
    assert check_quota(m, "userA", "client1", UNLIMITED, 1000, False) == 0


def test_quota_config_precedence() -> None:
    m = produce()
    for user, client, value in [
        (DEFAULT, None, 1000), (None, DEFAULT, 2000), (DEFAULT, DEFAULT, 3000), ("userA", None, 4000),
        ("userA", "client1", 5000), ("userB", None, 6000), ("userB", "client1", 7000), ("userB", DEFAULT, 8000),
        ("userC", None, 10000), (None, "client1", 9000),
    ]:
        m.update_quota(user, client, value)
    assert m.quota_types_enabled == 7

    def step(user: str, client: str, value: float, bound: float, tags: tuple[str, str], throttle: int) -> None:
        assert m.quota_limit(user, client) == bound
        assert m.quota_id(user, client) == QuotaId(*tags)
        assert m.record_and_get_throttle_ms(user, client, value, T) == throttle

    step("userA", "client1", 49500, 5000, ("userA", "client1"), 0)
    step("userA", "client2", 49500, 4000, ("userA", ""), 2375)
    step("userA", "client3", 0, 4000, ("userA", ""), 2375)
    step("userB", "client1", 88000, 7000, ("userB", "client1"), 2571)
    step("userB", "client2", 77000, 8000, ("userB", "client2"), 0)
    step("userD", "client1", 38500, 3000, ("userD", "client1"), 2833)
    m.update_quota(DEFAULT, DEFAULT, None)
    step("userD", "client1", 0, 1000, ("userD", ""), 0)  # tags changed: history restarts
    step("userE", "client4", 16500, 1000, ("userE", ""), 6500)
    m.update_quota(DEFAULT, None, None)
    step("userF", "client5", 27500, 2000, ("", "client5"), 3750)
    step("userG", "client5", 0, 2000, ("", "client5"), 3750)  # shared across users
    m.update_quota("userA", None, 8000)
    m.update_quota("userA", "client1", 10000)
    step("userA", "client1", 66000, 10000, ("userA", "client1"), 1550)
    m.update_quota("userA", DEFAULT, 12000)
    step("userA", "client6", 44000 + 93500, 12000, ("userA", "client6"), 1458)


def test_quota_violation_and_delay_queue() -> None:
    m = produce()
    m.update_quota(None, DEFAULT, 500)
    for i in range(10):
        assert m.record_and_get_throttle_ms("ANONYMOUS", "unknown", 400, T + 1000 * i) == 0
    assert m.delay_queue_size(T + 9000) == 0
    now = T + 10_500
    ms = m.record_and_get_throttle_ms("ANONYMOUS", "unknown", 2300, now)
    assert ms == 2100
    m.throttle("ANONYMOUS", "unknown", ms, now)
    assert m.delay_queue_size(now) == 1
    assert m.delay_queue_size(now + 2099) == 1
    assert m.delay_queue_size(now + 2100) == 0
    assert m.throttle_time_avg("ANONYMOUS", "unknown", now) == 2100
    throttles = [m.record_and_get_throttle_ms("ANONYMOUS", "unknown", 400, now + 2100 + 1000 * i) for i in range(10)]
    assert throttles == [1200] * 8 + [1700, 0]
    assert m.record_and_get_throttle_ms("ANONYMOUS", "unknown", 0, T + 22_600) == 0


def test_expired_sensors_are_recreated() -> None:
    m = produce()
    m.update_quota(None, DEFAULT, 500)
    m.record_and_get_throttle_ms("ANONYMOUS", "client1", 100, T)
    assert m.expire_sensors(T + 3_600_000) == 0  # exactly one hour: not yet expired
    assert m.expire_sensors(T + 3_600_001) == 1
    assert m.sensor_count == 0
    later = T + 3_600_001
    assert m.record_and_get_throttle_ms("ANONYMOUS", "client1", 10_000, later) > 0
    m.throttle("ANONYMOUS", "client1", 10, later)
    assert set(m.sensor_names()) == {"Produce-:client1", "ProduceThrottleTime-:client1"}


def test_a_record_keeps_its_sensor_alive() -> None:
    """The expiry counts from the last record (Kafka's Sensor.lastRecordTime), not from the sensor's creation."""
    m = produce()
    m.update_quota(None, DEFAULT, 500)
    m.record_and_get_throttle_ms("ANONYMOUS", "client1", 100, T)
    m.record_and_get_throttle_ms("ANONYMOUS", "client1", 100, T + 3_000_000)
    assert m.expire_sensors(T + 3_600_001) == 0
    assert m.expire_sensors(T + 6_600_001) == 1


def test_a_zero_quota_throttles_by_kafkas_int_of_long_max() -> None:
    """A zero bound makes Kafka's throttle time Long.MAX_VALUE (x / 0.0 = +Infinity); the manager returns it as
    Kafka's ``.toInt`` does: the low 32 bits, -1."""
    m = produce()
    m.update_quota(None, DEFAULT, 0)
    assert m.record_and_get_throttle_ms("ANONYMOUS", "client1", 100, T) == -1


def test_client_id_not_sanitized_user_sanitized() -> None:
    m = produce()
    m.update_quota(None, DEFAULT, 500)
    m.record_and_get_throttle_ms("ANONYMOUS", "client@#$%", 100, T)
    assert m.sensor_names() == ["Produce-:client@#$%"]
    m.update_quota("user with spaces", None, 100)
    assert m.quota_id("user with spaces", "x") == QuotaId("user%20with%20spaces", "")
    assert m.quota_limit("user with spaces", "x") == 100


def test_quota_types_refcount() -> None:
    m = ClientQuotaManager(QuotaType.CONTROLLER_MUTATION, quota_types_tracking="refcount")
    masks = []
    for user, client, value in [
        (None, "client1", 5), ("userA", None, 5), (None, "client2", 5), ("userB", None, 5), ("userA", "client1", 10),
        ("userA", "client1", 12), ("userA", None, None), ("userB", None, None), (None, "client1", None),
        (None, "client2", None), ("userA", "client1", None), ("userA", "client1", None),
    ]:
        m.update_quota(user, client, value)
        masks.append(m.quota_types_enabled)
        assert m.quotas_enabled == bool(m.quota_types_enabled)  # kept with the mask (read per request)
    assert masks == [1, 3, 3, 3, 7, 7, 7, 5, 5, 4, 0, 0]
    assert not m.quotas_enabled


def test_monotonic_mask_never_shrinks_and_keeps_recording() -> None:
    m = produce("monotonic")
    m.update_quota("u", None, 100)
    m.update_quota("u", None, None)
    assert m.quota_types_enabled == 2
    assert m.record_and_get_throttle_ms("u", "c", 10**9, T) == 0
    assert m.metric_value("u", "c", T) == 10**8  # recorded against an unlimited bound
    r = produce("refcount")
    r.update_quota("u", None, 100)
    r.update_quota("u", None, None)
    assert r.quota_types_enabled == 0
    r.record_and_get_throttle_ms("u", "c", 10**9, T)
    assert r.sensor_count == 0


def test_lowered_quota_keeps_samples_and_throttles_next_record() -> None:
    m = produce()
    m.update_quota("u", None, 1000)
    assert m.record_and_get_throttle_ms("u", "c", 5000, T) == 0
    m.update_quota("u", None, 100)  # single update: the existing metric gets the new bound
    assert m.record_and_get_throttle_ms("u", "c", 0, T + 100) > 0


def test_invalid_construction() -> None:
    with pytest.raises(ValueError):
        ClientQuotaManager(QuotaType.PRODUCE, samples=0)
    with pytest.raises(ValueError):
        ClientQuotaManager(QuotaType.PRODUCE, quota_types_tracking="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        produce().update_quota(None, None, 1)
