"""Both stores and ``store copy`` carry the entities beyond Kafka's model (issue 20): client-id prefixes, CIDR
ranges (IPv4 and IPv6) and a user's connection_creation_rate, SQLite -> ``kafka://`` (tansu) -> SQLite."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from quotaflow.cli.main import cli
from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.store import open_store
from quotaflow.testing.tansu import Tansu

from .conftest import GatewayFactory

pytestmark = pytest.mark.broker


def test_store_copy_carries_prefixes_ranges_and_principal_rates(tansu: Tansu, tmp_path: Path) -> None:
    url, first, back = f"kafka://{tansu.bootstrap}/quotas-{uuid.uuid4().hex[:8]}", tmp_path / "a.db", tmp_path / "b.db"
    with open_store(first) as src:
        src.alter([(QuotaEntity(client_id_prefix="etl/ä-"), {"producer_byte_rate": 1e5, "request_percentage": 5.0}),
                   (QuotaEntity(ip="10.1.0.0/16"), {"connection_creation_rate": 5.0}),
                   (QuotaEntity(ip="2001:db8::/32"), {"connection_creation_rate": 7.0}),
                   (QuotaEntity(user="alice"), {"connection_creation_rate": 3.0, "producer_byte_rate": 1e6}),
                   (QuotaEntity(user=DEFAULT), {"connection_creation_rate": 9.0})])
        truth = src.snapshot().entities
    runner = CliRunner()
    result = runner.invoke(cli, ["store", "copy", str(first), url])
    assert result.exit_code == 0 and "Copied 5 entities" in result.output, result.output
    result = runner.invoke(cli, ["store", "copy", url, str(back)])
    assert result.exit_code == 0, result.output
    with open_store(back) as dst:
        assert dst.snapshot().entities == truth
    result = runner.invoke(cli, ["client-quotas", "--resolve", "--names", "ip=10.1.200.3", "--store", url])
    assert result.stdout == "{ip=10.1.200.3}\n  connection_creation_rate=5.0 {ip=10.1.0.0/16}\n", result.output
    result = runner.invoke(cli, ["client-quotas", "--describe", "--names", "client-id-prefix=etl/ä-", "--store", url])
    assert "producer_byte_rate=100000.0" in result.output, result.output


def test_alter_and_describe_a_prefix_and_a_range_over_the_wire(gateway_factory: GatewayFactory) -> None:
    """AlterClientQuotas / DescribeClientQuotas through the gateway carry Redpanda's ``client-id-prefix`` entity
    type and CIDR ip names; ``--resolve`` over the gateway's HTTP endpoint names what the range overrides."""
    gw = gateway_factory(metrics_port=0)
    runner = CliRunner()

    def cq(*args: str) -> str:
        result = runner.invoke(cli, ["client-quotas", "--bootstrap-server", gw.bootstrap, *args])
        assert result.exit_code == 0, result.output
        return result.output

    assert cq("--alter", "--names", "client-id-prefix=flink-", "--add", "producer_byte_rate=2000") == \
        "Altered {client-id-prefix=flink-}\n"
    cq("--alter", "--names", "ip=10.1.0.0/16", "--add", "connection_creation_rate=5")
    cq("--alter", "--names", "ip=10.1.2.0/24", "--add", "connection_creation_rate=9")
    assert cq("--describe", "--any", "client-id-prefix") == "{client-id-prefix=flink-}\n  producer_byte_rate=2000.0\n"
    bad = runner.invoke(cli, ["client-quotas", "--bootstrap-server", gw.bootstrap, "--alter", "--names",
                              "ip=10.1.0.5/16", "--add", "connection_creation_rate=5"])
    assert bad.exit_code != 0 and "10.1.0.5/16 is not a valid CIDR range" in bad.output
    with open_store(gw.store_path) as st:
        assert st.get(QuotaEntity(client_id_prefix="flink-")) == {"producer_byte_rate": 2000.0}
        assert st.get(QuotaEntity(ip="10.1.2.0/24")) == {"connection_creation_rate": 9.0}
