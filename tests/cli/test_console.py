"""``quotaflow console``: a real process on a free port, the ready line, the API, a clean stop; startup errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from click.testing import CliRunner

from quotaflow.admin import Admin, Alteration
from quotaflow.cli.main import cli
from quotaflow.core.entities import QuotaEntity
from quotaflow.store.credentials import hash_password
from quotaflow.store.sqlite import SqliteStore
from quotaflow.testing.processes import stop_process

READY = "quotaflow console ready: "


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "q.db"
    with SqliteStore(path) as s:
        Admin(s).alter([Alteration.of(QuotaEntity(user="alice"), {"producer_byte_rate": 1024.0})])
    return path


def _start_console(store_path: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """``quotaflow console`` as a process on a free loopback port; it and the URL of its ready line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "quotaflow.cli.main", "console", "--store", str(store_path), "--listen",
         "127.0.0.1:0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(READY):
        stop_process(proc, timeout=15)
        raise AssertionError((line, proc.stderr.read() if proc.stderr else ""))
    return proc, line[len(READY):].strip()


def test_serves_on_a_free_port_until_sigterm(store_path: Path) -> None:
    proc, url = _start_console(store_path, "--read-only")
    try:
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


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "[::]:0", "192.0.2.10:0"])
def test_plain_http_beyond_loopback_is_refused(store_path: Path, listen: str) -> None:
    """Issue 19.4: passwords in clear over the network are refused before anything is bound."""
    result = CliRunner().invoke(cli, ["console", "--store", str(store_path), "--read-only", "--listen", listen])
    assert result.exit_code == 1
    assert "refusing to serve the console" in result.output and "--insecure-http" in result.output


def test_loopback_addresses() -> None:
    from quotaflow.cli.console import is_loopback

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.0.2.10", "no-such-host.invalid"))


def test_keyfile_needs_certfile(store_path: Path, tmp_path: Path) -> None:
    key = tmp_path / "k.pem"
    key.write_text("x")
    result = CliRunner().invoke(cli, ["console", "--store", str(store_path), "--read-only", "--keyfile", str(key)])
    assert result.exit_code == 2 and "--keyfile needs --certfile" in result.output


def test_a_bad_certificate_is_a_startup_error(store_path: Path, tmp_path: Path) -> None:
    cert = tmp_path / "c.pem"
    cert.write_text("not a certificate")
    result = CliRunner().invoke(cli, ["console", "--store", str(store_path), "--read-only", "--certfile", str(cert)])
    assert result.exit_code == 1 and "cannot load the TLS certificate" in result.output


def test_serves_https_with_security_headers(store_path: Path, tmp_path: Path) -> None:
    """``--certfile/--keyfile``: a real process serving TLS (a certificate made here, trusted through its CA);
    plain HTTP on the same port gets nothing."""
    import ssl

    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    with SqliteStore(store_path) as s:
        s.put_credential(hash_password("admin", "s3cret", iterations=1_000))
    config = tmp_path / "server.properties"
    config.write_text("connection.failed.authentication.delay.ms=300\n")
    proc, url = _start_console(store_path, "--certfile", str(tmp_path / "cert.pem"), "--keyfile",
                               str(tmp_path / "key.pem"), "--config", str(config))
    try:
        assert url.startswith("https://127.0.0.1:")
        trust = ssl.create_default_context()
        ca.configure_trust(trust)
        with httpx2.Client(verify=trust, timeout=30) as client:
            response = client.get(f"{url}/quotas")
            assert response.status_code == 200
            assert response.headers["strict-transport-security"].startswith("max-age=")
            assert response.headers["x-frame-options"] == "DENY"
            assert "default-src 'self'" in response.headers["content-security-policy"]
            started = time.monotonic()
            wrong = client.get(f"{url}/api/whoami", auth=("admin", "wrong"))
            assert wrong.status_code == 401
            assert time.monotonic() - started >= 0.3  # the --config delay
            assert client.get(f"{url}/api/whoami", auth=("admin", "s3cret")).json()["principal"] == "admin"
        with pytest.raises(httpx2.HTTPError):  # no plain HTTP on a TLS port
            httpx2.get(url.replace("https://", "http://") + "/quotas", timeout=10)
    finally:
        stop_process(proc, timeout=15)
