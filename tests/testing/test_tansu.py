"""The tansu upstream itself: loopback only, answers Kafka clients, restarts on its port, stops by PID."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from quotaflow.testing.tansu import Tansu, api_versions_probe

pytestmark = pytest.mark.broker


def _listening_ports(pid: int) -> list[str]:
    if shutil.which("ss") is None:
        pytest.skip("needs ss (iproute2) to list the broker's listening sockets")
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3] for line in out.splitlines() if f"pid={pid}," in line]


def test_binds_loopback_only_and_answers_api_versions() -> None:
    with Tansu() as broker:
        assert broker.pid is not None
        assert api_versions_probe(broker.host, broker.port)
        assert _listening_ports(broker.pid) == [broker.bootstrap]


def test_restart_keeps_the_port_and_stop_ends_the_process() -> None:
    broker = Tansu()
    with broker:
        first = broker.pid
        broker.restart()
        assert broker.pid != first
        assert api_versions_probe(broker.host, broker.port)
        pid = broker.pid
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not api_versions_probe(broker.host, broker.port, timeout=0.3)
