"""The gateway stage of ``make demo`` on a store that already holds default quotas (as the demo's does)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.demo import gateway_stage
from quotaflow.store import open_store

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_gateway_stage_throttles_one_producer_and_not_the_other(tmp_path: Path) -> None:
    store = tmp_path / "quotas.db"
    admin = Admin(open_store(store))
    defaults = {"producer_byte_rate": 1_000_000.0}
    assert admin.alter(
        [
            Alteration.of(QuotaEntity(user=DEFAULT), defaults),
            Alteration.of(QuotaEntity(user=DEFAULT, client_id=DEFAULT), {"request_percentage": 50.0}),
        ]
    )[0].ok
    admin.close()
    console = Console(record=True, width=160)
    summary = gateway_stage.run(tmp_path / "out", store, console=console, seconds=5.0)
    slow, fast = summary[gateway_stage.THROTTLED], summary[gateway_stage.UNTHROTTLED]
    assert slow["quota"] == gateway_stage.THROTTLED_RATE
    assert fast["quota"] is not None and fast["quota"] >= 1e12  # the store's 1 MB/s default was overridden
    assert slow["throttled_responses"] > 0 and fast["throttled_responses"] == 0
    assert slow["client_rate"] < 2 * gateway_stage.THROTTLED_RATE
    assert fast["gateway_rate"] > 4 * defaults["producer_byte_rate"]
    assert (tmp_path / "out" / "events" / "requests").is_dir()
    assert "demo-throttled" in console.export_text()
