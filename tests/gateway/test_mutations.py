"""KIP-599 controller-mutation quota on CreateTopics through the gateway, against a real tansu."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import QuotaEntity
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.server import GatewayThread
from quotaflow.store import open_store
from quotaflow.testing.tansu import Tansu

try:  # tests/gateway is a package when its __init__.py is present, else a rootdir on sys.path
    from .gateway_wire import Wire
except ImportError:
    from gateway_wire import Wire  # type: ignore[no-redef]

pytestmark = pytest.mark.broker


@pytest.fixture
def gateway(tansu: Tansu, tmp_path: Path) -> Iterator[GatewayThread]:
    db = tmp_path / "q.db"
    with open_store(db) as store:
        # 2 samples x 1 s at 2 partitions/s: a bucket of 4 permits
        Admin(store).alter([Alteration.of(QuotaEntity(client_id="creator"), {"controller_mutation_rate": 2.0})])
    config = GatewayConfig(controller_quota_window_num=2, controller_quota_window_size_seconds=1)
    with GatewayThread(tansu.bootstrap, {"PLAINTEXT": "127.0.0.1:0"}, db, config=config) as gw:
        yield gw


def _create(wire: Wire, version: int, names: list[str], partitions: int = 3,
            validate_only: bool = False) -> CreateTopicsResponse:
    t = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest[version](
        topics=[t(name=n, num_partitions=partitions, replication_factor=1, assignments=[], configs=[]) for n in names],
        timeout_ms=10_000, validate_only=validate_only)
    wire.send(request, version, client_id="creator")
    return CreateTopicsResponse.decode(wire.recv(), version=version, header=True)


def test_strict_quota_refuses_the_topics_that_do_not_fit(gateway: GatewayThread) -> None:
    stamp = time.time_ns()
    names = [f"a-{stamp}", f"b-{stamp}", f"c-{stamp}"]
    response = _create(Wire(gateway.address()), 6, names)
    results = {r.name: (r.error_code, r.error_message) for r in response.topics}
    # 4 tokens: a takes 3 (1 left), b passes the check and takes 3 (-2), c is refused (check first, then record)
    assert results[names[0]][0] == 0 and results[names[1]][0] == 0
    assert results[names[2]] == (89, "The throttling quota has been exceeded.")
    assert response.throttle_time_ms > 0
    again = _create(Wire(gateway.address()), 6, [f"d-{stamp}"])  # still in debt: refused without the upstream
    assert [(r.name, r.error_code) for r in again.topics] == [(f"d-{stamp}", 89)]


def test_permissive_quota_creates_everything_and_throttles(gateway: GatewayThread) -> None:
    stamp = time.time_ns()
    names = [f"p-{stamp}-{i}" for i in range(3)]
    response = _create(Wire(gateway.address()), 5, names)
    assert sorted((r.name, r.error_code) for r in response.topics) == [(n, 0) for n in names]
    assert response.throttle_time_ms > 0


def test_validate_only_records_nothing(gateway: GatewayThread) -> None:
    stamp = time.time_ns()
    wire = Wire(gateway.address())
    for i in range(3):  # distinct names: tansu creates topics even when asked only to validate
        response = _create(wire, 6, [f"v-{stamp}-{i}"], partitions=3, validate_only=True)
        assert [r.error_code for r in response.topics] == [0] and response.throttle_time_ms == 0
