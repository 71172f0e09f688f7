"""KIP-599 controller-mutation quota on CreateTopics, DeleteTopics and CreatePartitions through the gateway, against
a real tansu."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import QuotaEntity
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.server import GatewayThread
from quotaflow.store import open_store
from quotaflow.testing.tansu import Tansu

try:  # tests/gateway is a package when its __init__.py is present, else a rootdir on sys.path
    from ..gateway_wire import Wire
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


# -- KIP-599 on DeleteTopics and CreatePartitions (issue 20 item 5): permits from the upstream's partition counts --

def _make_topics(gateway: GatewayThread, names: list[str], partitions: int) -> None:
    """Created through the gateway by a client no quota applies to."""
    response = _create_as(Wire(gateway.address()), "setup", names, partitions)
    assert [r.error_code for r in response.topics] == [0] * len(names)


def _create_as(wire: Wire, client_id: str, names: list[str], partitions: int) -> CreateTopicsResponse:
    t = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest[5](
        topics=[t(name=n, num_partitions=partitions, replication_factor=1, assignments=[], configs=[]) for n in names],
        timeout_ms=10_000, validate_only=False)
    wire.send(request, 5, client_id=client_id)
    return CreateTopicsResponse.decode(wire.recv(), version=5, header=True)


def _delete_fresh(gateway: GatewayThread, tag: str, version: int) -> tuple[list[str], DeleteTopicsResponse]:
    """Three fresh 3-partition topics, deleted in one request of ``version`` by the quota-bound client."""
    names = [f"{tag}-{time.time_ns()}-{i}" for i in range(3)]
    _make_topics(gateway, names, 3)
    wire = Wire(gateway.address())
    wire.send(DeleteTopicsRequest[version](topic_names=names, timeout_ms=10_000), version, client_id="creator")
    return names, DeleteTopicsResponse.decode(wire.recv(), version=version, header=True)


def test_delete_topics_strict_costs_each_topics_partitions(gateway: GatewayThread) -> None:
    names, response = _delete_fresh(gateway, "del", 5)
    results = {r.name: (r.error_code, r.error_message) for r in response.responses}
    # 4 tokens: 3 partitions (1 left), 3 more pass the check (-2), the third topic is refused
    assert results[names[0]][0] == 0 and results[names[1]][0] == 0
    assert results[names[2]] == (89, "The throttling quota has been exceeded.")
    # Kafka's throttle: -tokens / quota × 1000 = 2 / 2 × 1000, less what refilled since (tokens only grow)
    assert 0 < response.throttle_time_ms <= 1000


def test_delete_topics_below_v5_is_permissive(gateway: GatewayThread) -> None:
    names, response = _delete_fresh(gateway, "dp", 4)
    assert sorted((r.name, r.error_code) for r in response.responses) == [(n, 0) for n in names]
    assert response.throttle_time_ms > 0  # 9 permits from a 4-permit bucket: throttled, nothing refused


def test_create_partitions_strict_counts_the_new_partitions_from_the_upstream(gateway: GatewayThread) -> None:
    """Neither tansu nor librdkafka's mock cluster implements CreatePartitions, so the bucket is drained with a
    DeleteTopics first; the CreatePartitions that follows is refused by the gateway itself, its permits (new
    partitions = 4 - the 1 the upstream's metadata reports) checked against the debt."""
    stamp = time.time_ns()
    doomed = [f"cpd-{stamp}-{i}" for i in range(2)]
    grow = f"cp-{stamp}"
    _make_topics(gateway, doomed, 3)
    _make_topics(gateway, [grow], 1)
    wire = Wire(gateway.address())
    wire.send(DeleteTopicsRequest[5](topic_names=doomed, timeout_ms=10_000), 5, client_id="creator")
    deleted = DeleteTopicsResponse.decode(wire.recv(), version=5, header=True)
    assert [r.error_code for r in deleted.responses] == [0, 0]  # 3 (1 left), 3 (-2)
    topic = CreatePartitionsRequest.CreatePartitionsTopic
    request = CreatePartitionsRequest[3](topics=[topic(name=grow, count=4, assignments=None)], timeout_ms=10_000,
                                         validate_only=False)
    wire.send(request, 3, client_id="creator")
    response = CreatePartitionsResponse.decode(wire.recv(), version=3, header=True)
    assert [(r.name, r.error_code, r.error_message) for r in response.results] == [
        (grow, 89, "The throttling quota has been exceeded.")]
    assert 0 < response.throttle_time_ms <= 1000


def test_admin_client_delete_topics_over_the_quota(gateway: GatewayThread) -> None:
    """A real client (kafka-python's admin, its own DeleteTopics version) gets THROTTLING_QUOTA_EXCEEDED."""
    from kafka.admin import KafkaAdminClient

    stamp = time.time_ns()
    names = [f"adm-{stamp}-{i}" for i in range(3)]
    _make_topics(gateway, names, 3)
    host, port = gateway.address()
    admin = KafkaAdminClient(bootstrap_servers=f"{host}:{port}", client_id="creator", request_timeout_ms=10_000)
    try:
        result = admin.delete_topics(names, raise_errors=False)
    finally:
        admin.close()
    codes = {t["name"]: t["error_code"] for t in result["topics"]}
    assert codes[names[0]] == 0 and codes[names[1]] == 0 and codes[names[2]] == 89
