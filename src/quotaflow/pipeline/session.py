"""Spark session presets in one place, so every job, test and benchmark starts Spark the same way.

* ``local``: ``local[*]`` with the UI on, for interactive runs.
* ``test``: ``local[2]``, UI off, 4 shuffle partitions, small memory: fast start for the test suite.
* ``streaming``: UI off, RocksDB state store (exact per-key state across micro-batches, small JVM heap).

All presets enable Arrow (the pipeline moves rows between the JVM and Python as Arrow batches) and keep logs quiet.
A ``local`` master binds the driver, its block manager and the UI to 127.0.0.1 only: Spark's defaults pick the
first non-loopback interface (and the UI listens on 0.0.0.0).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

PRESETS: Final[dict[str, dict[str, str]]] = {
    "local": {
        "spark.master": "local[*]",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
    },
    "test": {
        "spark.master": "local[2]",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
        "spark.driver.memory": "1g",
        "spark.sql.adaptive.enabled": "false",
    },
    "streaming": {
        "spark.master": "local[2]",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
        ),
    },
}

COMMON: Final[dict[str, str]] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": "-Dlog4j2.level=ERROR",
    "spark.python.worker.reuse": "true",
}


LOOPBACK: Final = "127.0.0.1"
LOCAL_ONLY: Final[dict[str, str]] = {"spark.driver.host": LOOPBACK, "spark.driver.bindAddress": LOOPBACK}


def get_session(preset: str = "local", master: str | None = None, **conf: str) -> Any:
    """The (possibly already running) SparkSession for ``preset``; ``master`` overrides the preset's master."""
    if preset not in PRESETS:
        raise ValueError(f"unknown Spark preset {preset!r}; choose one of {', '.join(sorted(PRESETS))}")
    # Workers must run the same interpreter as the driver (the venv), whatever PATH says.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(f"quotaflow-{preset}")
    settings = {**COMMON, **PRESETS[preset], **conf}
    if master is not None:
        settings["spark.master"] = master
    if settings["spark.master"].startswith(("local", f"spark://{LOOPBACK}:")):  # a loopback cluster: driver too
        settings = {**LOCAL_ONLY, **settings}
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)  # read by the JVM at launch: UI and RPC on loopback
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@contextmanager
def session_scope(preset: str = "local", master: str | None = None) -> Iterator[Any]:
    """A SparkSession for one job. The session already active in this thread (a test's, a notebook's, the demo's)
    is used and left running: only a session this scope started is stopped when the job ends."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    session = get_session(preset, master)
    try:
        yield session
    finally:
        session.stop()
