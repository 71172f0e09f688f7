from __future__ import annotations

from typing import Any

from quotaflow.core.errors import ConnectionThrottledError
from quotaflow.engine.connection import ConnectionQuotaConfig
from quotaflow.gateway.observation.connection_events import ObservedConnectionQuotas


def test_every_admission_decision_becomes_one_row() -> None:
    rows: list[dict[str, Any]] = []
    q = ObservedConnectionQuotas(ConnectionQuotaConfig(max_connection_creation_rate=1), rows.append)
    q.add_listener("EXTERNAL")
    q.update_ip_connection_rate_quota("10.0.0.1", 2)
    expected = []
    for i in range(40):
        arrived = 1_000_000 + 10 * i
        delay = q.record_connection_and_get_throttle_ms("EXTERNAL", arrived)
        try:
            q.record_ip_connection_maybe_throttle("EXTERNAL", "10.0.0.1", arrived + delay)
            result, ip_ms = "ACCEPTED", 0
        except ConnectionThrottledError as e:
            result, ip_ms = "IP_THROTTLED", e.throttle_ms
        expected.append({"ts_ms": arrived, "listener": "EXTERNAL", "client_ip": "10.0.0.1",
                         "accept_delay_ms": delay, "ip_throttle_ms": ip_ms, "result": result})
    assert rows == expected
    # the run exercises both outcomes and the broker-rate delay, so the rows are not trivially uniform
    assert {r["result"] for r in rows} == {"ACCEPTED", "IP_THROTTLED"}
    assert any(r["accept_delay_ms"] > 0 for r in rows)
