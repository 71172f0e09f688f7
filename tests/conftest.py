"""Fixtures shared by every test area. Spark is started once per test session, only when a test asks for it."""

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
