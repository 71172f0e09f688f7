"""The backtest on a real Spark standalone cluster: a master and a worker started from pyspark's own
``bin/spark-class`` on 127.0.0.1 (stopped by PID), ``quotaflow backtest --master spark://…`` in its own process (a
second SparkContext cannot share this process with the session fixture), decisions and windows == replay."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from quotaflow.pipeline import job, replay
from quotaflow.pipeline.generate import TrafficSpec, generate

SRC = Path(__file__).resolve().parents[2] / "src"
START_TIMEOUT_S = 120


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))  # fmt: skip
    env.pop("SPARK_HOME", None)  # spark-class finds pyspark's own
    return env


def _start(args: list[str], log: Path, pattern: str) -> tuple[subprocess.Popen[bytes], re.Match[str]]:
    """Start ``spark-class ARGS`` (spark-class execs the JVM, so the PID is the JVM's) and wait for ``pattern``
    in its log."""
    out = log.open("wb")
    proc = subprocess.Popen([str(_spark_class()), *args], stdout=out, stderr=subprocess.STDOUT, env=_env())
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return proc, found
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    _stop(proc)
    pytest.fail(f"spark-class {args[0]} did not start:\n{log.read_text(errors='replace')[-3000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone master and one worker (1 core, 1 GiB), both on 127.0.0.1 with ports chosen by the OS."""
    logs = tmp_path_factory.mktemp("spark-cluster")
    master, m = _start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                        "--webui-port", "0"], logs / "master.log",
                       r"Starting Spark master at (spark://127\.0\.0\.1:\d+)")  # fmt: skip
    url = m.group(1)
    try:
        worker, _ = _start(["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--port", "0",
                            "--webui-port", "0", "--cores", "1", "--memory", "1g", "--work-dir", str(logs / "work")],
                           logs / "worker.log", r"Successfully registered with master")  # fmt: skip
        try:
            yield url
        finally:
            _stop(worker)
    finally:
        _stop(master)


@pytest.mark.spark
@pytest.mark.slow
def test_backtest_on_a_standalone_cluster_equals_replay(cluster: str, quota_store: Path, tmp_path: Path) -> None:
    events = tmp_path / "ev"
    generate(TrafficSpec(events=300_000, seed=15, chunk_events=100_000), events)
    bt = tmp_path / "bt"
    r = subprocess.run([sys.executable, "-m", "quotaflow.cli.main", "backtest", "--events", str(events), "--store",
                        str(quota_store), "--out", str(bt), "--master", cluster],
                       env=_env(), capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    sr = replay.run(job.JobSpec(events, quota_store, tmp_path / "rp"))
    assert sr.counts["requests"] == 300_000
    window_keys = ["broker", "quota_type", "tag_user", "tag_client_id", "window_start_ms"]
    for name, keys in (("decisions", ["broker", "seq"]), ("windows", window_keys)):
        a = pq.read_table(tmp_path / "rp" / name).to_pandas().sort_values(keys).reset_index(drop=True)
        b = pq.read_table(bt / name).to_pandas().sort_values(keys).reset_index(drop=True)[a.columns]
        assert a.astype({"broker": str}).equals(b.astype({"broker": str})), name
    d = pq.read_table(bt / "decisions").to_pandas()
    assert (d["throttle_ms"] > 0).any() and len(d) == 300_000
