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
    assert result.output == "{ip=10.1.200.3}\n  connection_creation_rate=5.0 {ip=10.1.0.0/16}\n", result.output
    result = runner.invoke(cli, ["client-quotas", "--describe", "--names", "client-id-prefix=etl/ä-", "--store", url])
    assert "producer_byte_rate=100000.0" in result.output, result.output
