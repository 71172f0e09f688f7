"""Spark presets: a local master stays on the loopback interface (driver RPC, block manager and UI)."""

from __future__ import annotations

from typing import Any

import pytest

from quotaflow.pipeline.session import PRESETS, get_session


@pytest.mark.spark
def test_local_session_binds_loopback_only(spark: Any) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.host") == "127.0.0.1"
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert spark.sparkContext.master.startswith("local")


def test_unknown_preset_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown Spark preset 'fast'"):
        get_session("fast")
    assert {"local", "test", "streaming"} <= set(PRESETS)


@pytest.mark.spark
def test_session_scope_leaves_the_active_session_running(spark: Any) -> None:
    """A job run in-process (a CLI under test, the demo) must not stop a session it did not start."""
    from quotaflow.pipeline.session import session_scope

    with session_scope("local") as job_session:
        assert job_session.sparkContext is spark.sparkContext
    assert spark.range(3).count() == 3
