"""``quotaflow gateway`` as a subprocess: ready line, Kafka traffic, /resolve, clean SIGTERM stop (by PID)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from quotaflow.admin import Admin, Alteration
from quotaflow.core.entities import QuotaEntity
from quotaflow.store import open_store
from quotaflow.testing.tansu import Tansu

try:  # tests/gateway is a package when its __init__.py is present, else a rootdir on sys.path
    from .gateway_wire import Wire
except ImportError:
    from gateway_wire import Wire  # type: ignore[no-redef]

pytestmark = pytest.mark.broker


def test_gateway_subprocess(tansu: Tansu, tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    with open_store(db) as store:
        Admin(store).alter([Alteration.of(QuotaEntity(user="alice"), {"producer_byte_rate": 1024.0})])
    proc = subprocess.Popen(
        [sys.executable, "-m", "quotaflow.cli.main", "gateway", "--upstream", tansu.bootstrap,
         "--listen", "PLAINTEXT=127.0.0.1:0", "--store", str(db), "--metrics-port", "0",
         "--event-log", str(tmp_path / "events")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"PLAINTEXT=([\d.]+):(\d+) metrics=(http://\S+)", line)
        assert m, line
        wire = Wire((m.group(1), int(m.group(2))))
        wire.send(ApiVersionsRequest[0](), 0)
        assert ApiVersionsResponse.decode(wire.recv(), version=0, header=True).error_code == 0
        with urllib.request.urlopen(f"{m.group(3)}/resolve?user=alice&client-id=c1", timeout=10) as resp:
            doc = json.loads(resp.read())
        assert doc["quotas"]["producer_byte_rate"]["value"] == 1024.0
        with urllib.request.urlopen(f"{m.group(3)}/metrics", timeout=10) as resp:
            assert resp.status == 200
        wire.sock.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    assert proc.returncode == 0, err
    assert any((tmp_path / "events" / "requests").rglob("*.parquet"))
