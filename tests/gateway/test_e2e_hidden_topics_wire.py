"""quotaflow's own topics, API by API, over the raw wire through a gateway in front of tansu (no authorizer, the
default mode): each request names one of quotaflow's topics and an ordinary one; the hidden one comes back with
TOPIC_AUTHORIZATION_FAILED, the ordinary one is served by the broker, in one well-formed response."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse, OffsetFetchRequest, OffsetFetchResponse

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import QuotaEntity
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.server import GatewayThread
from quotaflow.store import open_store
from quotaflow.testing.tansu import Tansu

from .gateway_wire import Wire

pytestmark = pytest.mark.broker

HIDDEN = "__quotaflow_usage"


@pytest.fixture
def gateway(tansu: Tansu, tmp_path: Path) -> Iterator[GatewayThread]:
    db = tmp_path / "q.db"
    with open_store(db) as store:  # 2 samples x 1 s at 2 partitions/s: a bucket of 4 permits for "creator"
        Admin(store).alter([Alteration.of(QuotaEntity(client_id="creator"), {"controller_mutation_rate": 2.0})])
    config = GatewayConfig(controller_quota_window_num=2, controller_quota_window_size_seconds=1)
    with GatewayThread(tansu.bootstrap, {"PLAINTEXT": "127.0.0.1:0"}, db, config=config) as gw:
        yield gw


def _call(wire: Wire, request: Any, version: int, response: Any, client_id: str = "wire") -> Any:
    wire.send(request, version, client_id=client_id)
    return response.decode(wire.recv(), version=version, header=True)


def _create(wire: Wire, names: list[str], partitions: int = 1, client_id: str = "wire") -> dict[str, int]:
    t = CreateTopicsRequest.CreatableTopic
    answer = _call(wire, CreateTopicsRequest[6](topics=[
        t(name=n, num_partitions=partitions, replication_factor=1, assignments=[], configs=[]) for n in names],
        timeout_ms=10_000, validate_only=False), 6, CreateTopicsResponse, client_id)
    return {r.name: r.error_code for r in answer.topics}


def test_each_api_refuses_the_hidden_topic_and_serves_the_other(gateway: GatewayThread) -> None:
    wire = Wire(gateway.address())
    ordinary = f"plain-{uuid.uuid4().hex[:8]}"
    assert _create(wire, [HIDDEN, ordinary]) == {ordinary: 0, HIDDEN: 29}

    lo = ListOffsetsRequest
    answer = _call(wire, lo[5](replica_id=-1, isolation_level=0, topics=[
        lo.ListOffsetsTopic(name=n, partitions=[lo.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=-1)]) for n in (HIDDEN, ordinary)]), 5,
        ListOffsetsResponse)
    assert {t.name: [p.error_code for p in t.partitions] for t in answer.topics} == {HIDDEN: [29], ordinary: [0]}

    dr = DeleteRecordsRequest  # tansu closes the connection on DeleteRecords: the hidden topic alone, answered here
    answer = _call(wire, dr[1](topics=[dr.DeleteRecordsTopic(name=HIDDEN, partitions=[
        dr.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=p, offset=0) for p in (0, 1)])],
        timeout_ms=5000), 1, DeleteRecordsResponse)
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in answer.topics] == \
        [(HIDDEN, [(0, 29), (1, 29)])]

    of = OffsetFetchRequest
    answer = _call(wire, of[5](group_id="g", topics=[of.OffsetFetchRequestTopic(name=n, partition_indexes=[0])
                                                    for n in (HIDDEN, ordinary)]), 5, OffsetFetchResponse)
    errors = {t.name: [p.error_code for p in t.partitions] for t in answer.topics}
    assert errors[HIDDEN] == [29] and errors[ordinary] != [29]

    dc = DescribeConfigsRequest
    answer = _call(wire, dc[1](resources=[dc.DescribeConfigsResource(resource_type=2, resource_name=n,
                                                                     configuration_keys=None)
                                          for n in (HIDDEN, ordinary)], include_synonyms=False), 1,
                   DescribeConfigsResponse)
    errors = {r.resource_name: r.error_code for r in answer.results}
    assert errors[HIDDEN] == 29 and errors[ordinary] != 29

    cp = CreatePartitionsRequest  # tansu has no CreatePartitions: the refusal is the gateway's alone
    answer = _call(wire, cp[1](topics=[cp.CreatePartitionsTopic(name=HIDDEN, count=8, assignments=None)],
                               timeout_ms=5000, validate_only=False), 1, CreatePartitionsResponse)
    assert [(r.name, r.error_code) for r in answer.results] == [(HIDDEN, 29)]


def test_a_refusal_and_a_mutation_quota_refusal_share_one_answer(gateway: GatewayThread) -> None:
    """Every topic the ACL check lets through is over the controller-mutation quota (KIP-599): the gateway answers
    alone, with both refusals in it."""
    wire = Wire(gateway.address())
    stamp = time.time_ns()
    first = _create(wire, [f"a-{stamp}", f"b-{stamp}"], partitions=3, client_id="creator")  # drains the bucket
    assert first[f"a-{stamp}"] == 0
    answer = _create(wire, [f"__quotaflow_{stamp}", f"d-{stamp}"], client_id="creator")
    assert answer == {f"d-{stamp}": 89, f"__quotaflow_{stamp}": 29}
