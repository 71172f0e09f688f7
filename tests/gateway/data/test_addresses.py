from __future__ import annotations

from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse

from quotaflow.gateway.data.addresses import AddressMap, rewrite_addresses

GW = AddressMap(("127.0.0.1", 19092), {2: ("127.0.0.1", 19093)})


def test_metadata_brokers() -> None:
    b = MetadataResponse.MetadataResponseBroker
    msg = MetadataResponse[12](
        brokers=[b(node_id=1, host="up", port=9092, rack=None), b(node_id=2, host="up2", port=9092, rack="r")]
    )
    rewrite_addresses(msg, ApiKey.Metadata, GW)
    assert [(x.host, x.port) for x in msg.brokers] == [("127.0.0.1", 19092), ("127.0.0.1", 19093)]


def test_find_coordinator_old_and_new() -> None:
    old = FindCoordinatorResponse[3](error_code=0, node_id=2, host="up", port=1)
    rewrite_addresses(old, ApiKey.FindCoordinator, GW)
    assert (old.host, old.port) == ("127.0.0.1", 19093)
    none = FindCoordinatorResponse[1](error_code=15, node_id=-1, host="", port=-1)
    rewrite_addresses(none, ApiKey.FindCoordinator, GW)
    assert (none.host, none.port) == ("", -1)  # "no coordinator" stays as it is
    c = FindCoordinatorResponse.Coordinator
    new = FindCoordinatorResponse[4](coordinators=[c(key="g", node_id=1, host="up", port=1, error_code=0)])
    rewrite_addresses(new, ApiKey.FindCoordinator, GW)
    assert (new.coordinators[0].host, new.coordinators[0].port) == ("127.0.0.1", 19092)


def test_describe_cluster() -> None:
    b = DescribeClusterResponse.DescribeClusterBroker
    msg = DescribeClusterResponse[1](brokers=[b(broker_id=7, host="up", port=1, rack=None)])
    rewrite_addresses(msg, ApiKey.DescribeCluster, GW)
    assert (msg.brokers[0].host, msg.brokers[0].port) == ("127.0.0.1", 19092)
