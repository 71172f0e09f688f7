"""``quotaflow console``: a real process on a free port, the ready line, the API, a clean stop; startup errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from click.testing import CliRunner

from quotaflow.admin import Admin, Alteration
from quotaflow.cli.main import cli
from quotaflow.core.entities import QuotaEntity
from quotaflow.store.sqlite import SqliteStore
from quotaflow.testing.processes import stop_process

READY = "quotaflow console ready: "


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "q.db"
    with SqliteStore(path) as s:
        Admin(s).alter([Alteration.of(QuotaEntity(user="alice"), {"producer_byte_rate": 1024.0})])
    return path


def test_serves_on_a_free_port_until_sigterm(store_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "quotaflow.cli.main", "console", "--store", str(store_path), "--listen",
         "127.0.0.1:0", "--read-only"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(READY), (line, proc.stderr.read() if proc.poll() is not None else "")
        url = line[len(READY):].strip()
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")
        assert httpx2.get(f"{url}/api/quotas").json() == [
            {"entity": {"user": "alice"}, "values": {"producer_byte_rate": 1024.0}}
        ]
        assert "read-only" in httpx2.get(f"{url}/quotas").text
        assert httpx2.get(f"{url}/static/uPlot.iife.min.js").status_code == 200
    finally:
        stop_process(proc, timeout=15)
    # uvicorn shuts down gracefully, then re-raises the signal it caught, as a signalled process should exit
    assert proc.returncode == -signal.SIGTERM
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read()


def test_writes_need_a_user_in_the_store_or_read_only(store_path: Path) -> None:
    result = CliRunner().invoke(cli, ["console", "--store", str(store_path), "--listen", "127.0.0.1:0"])
    assert result.exit_code == 1
    assert "no user in the store" in result.output and "quotaflow users add" in result.output


@pytest.mark.parametrize("read_only", [[], ["--read-only"]])
def test_a_missing_store_is_an_error_not_created(tmp_path: Path, read_only: list[str]) -> None:
    missing = tmp_path / "typo.db"
    result = CliRunner().invoke(cli, ["console", "--store", str(missing), "--listen", "127.0.0.1:0", *read_only])
    assert result.exit_code == 1 and f"quota store {missing} does not exist" in result.output
    assert not missing.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "8080"], "expected HOST:PORT"),
        (["--listen", "127.0.0.1:99999"], "expected HOST:PORT"),
        (["--gateway", "127.0.0.1:9000"], "expected the gateway's HTTP endpoint"),
    ],
)
def test_bad_options(store_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["console", "--store", str(store_path), "--read-only", *args])
    assert result.exit_code == 2 and message in result.output


def test_the_demo_prints_commands_that_parse(tmp_path: Path) -> None:
    import shlex

    from quotaflow.cli.console import console
    from quotaflow.cli.gateway import gateway
    from quotaflow.demo.main import console_commands

    gateway_cmd, console_cmd = console_commands(tmp_path / "demo-out" / "quotaflow.db", tmp_path / "demo-out")
    (tmp_path / "demo-out" / "gateway").mkdir(parents=True)
    (tmp_path / "demo-out" / "gateway" / "gateway.properties").write_text("quota.window.num=3\n")
    for command, cmd in ((gateway, gateway_cmd), (console, console_cmd)):
        argv = shlex.split(cmd)
        assert argv[:2] == ["quotaflow", command.name]
        ctx = command.make_context(command.name, argv[2:])  # click parses and validates every option
        assert Path(ctx.params["store"]) == tmp_path / "demo-out" / "quotaflow.db"
    assert "--gateway http://127.0.0.1:9193" in console_cmd and "--metrics-port 9193" in gateway_cmd
