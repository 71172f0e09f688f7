"""Fixtures shared by every test area. Spark is started once per test session, only when a test asks for it; the
quota stores and generated traffic of the pipeline and demo tests are built once, when first asked for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reference import VECTORS


@pytest.fixture(scope="session")
def vectors_dir() -> Path:
    if not (VECTORS / "index.csv").exists():
        pytest.fail(f"Kafka reference vectors not found at {VECTORS}")
    return VECTORS


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one SparkSession of the test session (preset 'test': local[2], UI off, few shuffle partitions)."""
    from quotaflow.pipeline.session import get_session

    session = get_session("test")
    yield session
    session.stop()


def make_store(path: Path, scale: float = 1.0) -> Path:
    """Produce, fetch and request quotas at user, default-user, (user, client) and default-client levels, plus a
    default and one specific IP connection quota. ``scale`` multiplies every limit."""
    from quotaflow.core.entities import DEFAULT, QuotaEntity
    from quotaflow.store import open_store

    st = open_store(path)
    st.alter(
        [
            (
                QuotaEntity(user="tenant-0000"),
                {
                    "producer_byte_rate": 2e6 * scale,
                    "consumer_byte_rate": 4e6 * scale,
                    "request_percentage": 20.0 * scale,
                },
            ),
            (QuotaEntity(user=DEFAULT), {"producer_byte_rate": 3e5 * scale, "consumer_byte_rate": 6e5 * scale}),
            (QuotaEntity(user="tenant-0003", client_id="tenant-0003-app-0"), {"producer_byte_rate": 1e5 * scale}),
            (QuotaEntity(client_id=DEFAULT), {"request_percentage": 0.5 * scale}),
            (QuotaEntity(ip=DEFAULT), {"connection_creation_rate": 50.0 * scale}),
            (QuotaEntity(ip="10.0.1.1"), {"connection_creation_rate": 5.0 * scale}),
        ]
    )
    st.close()
    return path


@pytest.fixture(scope="session")
def quota_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_store(tmp_path_factory.mktemp("store") / "quotas.db")


@pytest.fixture(scope="session")
def loose_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_store(tmp_path_factory.mktemp("store") / "loose.db", scale=5.0)


@pytest.fixture(scope="session")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12k requests over three brokers, in several files (so batches and partitions cut quota-ids)."""
    from quotaflow.pipeline.generate import TrafficSpec, generate

    out = tmp_path_factory.mktemp("traffic")
    generate(TrafficSpec(events=12_000, seed=11, chunk_events=5_000, rate=2_000), out)
    return out
