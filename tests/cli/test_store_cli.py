"""Every command taking ``--store`` fails with one line and exit status 1 on a corrupt, missing or unsupported
store (no sqlite3 traceback, no file created for a URL), and ``quotaflow store copy`` between SQLite files."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Final

import pytest
from click.testing import CliRunner, Result

from quotaflow.cli.main import cli
from quotaflow.core.entities import QuotaEntity
from quotaflow.store import open_store
from quotaflow.store.base import Credential


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), input="pw\n")


def commands(store: str, events: Path, out: Path) -> list[list[str]]:
    return [
        ["configs", "--describe", "--entity-type", "users", "--store", store],
        ["configs", "--alter", "--entity-type", "users", "--entity-name", "a", "--add-config",
         "producer_byte_rate=10", "--store", store],
        ["client-quotas", "--describe", "--store", store],
        ["client-quotas", "--resolve", "--names", "user=a,client-id=c", "--store", store],
        ["client-quotas", "--alter", "--names", "user=a", "--add", "producer_byte_rate=10", "--store", store],
        ["users", "add", "bob", "--password", "pw", "--store", store],
        ["users", "list", "--store", store],
        ["users", "remove", "bob", "--store", store],
        ["replay", "--events", str(events), "--store", store, "--out", str(out)],
        ["backtest", "--events", str(events), "--store", store, "--out", str(out)],
        ["gateway", "--upstream", "127.0.0.1:9", "--listen", "PLAINTEXT=127.0.0.1:0", "--store", store],
        ["store", "copy", store, str(out / "copy.db")],
        ["console", "--store", store, "--read-only", "--listen", "127.0.0.1:0"],
    ]


def _one_line_failure(result: Result, expected: str) -> None:
    assert result.exit_code == 1, (result.exit_code, result.output)
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and expected in lines[0], result.output
    assert "Traceback" not in result.output and "sqlite3." not in result.output


@pytest.fixture
def events(tmp_path: Path) -> Path:
    (tmp_path / "events" / "requests").mkdir(parents=True)
    (tmp_path / "events" / "requests" / "part.jsonl").write_text("{}\n")
    return tmp_path / "events"


def test_corrupt_store(tmp_path: Path, events: Path) -> None:
    store = tmp_path / "corrupt.db"
    store.write_bytes(b"\x00garbage, not SQLite" * 400)
    for args in commands(str(store), events, tmp_path / "out"):
        _one_line_failure(run(*args), "file is not a database")


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379", "kafka:/127.0.0.1:9092", "kafka://nohost"])
def test_unsupported_store_url(tmp_path: Path, events: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = set(tmp_path.rglob("*"))
    for args in commands(url, events, tmp_path / "out"):
        _one_line_failure(run(*args), url.split(":")[0])
    assert set(tmp_path.rglob("*")) == before  # no file, no directory made out of the URL


JOBS: Final = [["replay"], ["backtest"], ["recommend"], ["shadow", "report"]]


@pytest.mark.parametrize("command", [["users", "list"], ["configs", "--describe", "--entity-type", "users"],
                                     ["acls", "--list"], ["client-quotas", "--describe"], *JOBS])
def test_unreachable_cluster_store_says_what_it_tries_then_fails_in_one_line(command: list[str],
                                                                             tmp_path: Path) -> None:
    """Issue 35: a closed port was 30 s of silence, then ``KafkaTimeoutError``. Now a line on stderr says which
    bootstrap is being tried and for how long, and the failure names the address and the setting bounding it; the
    jobs that read the store (backtest, replay, recommend, the shadow report) say it the same way."""
    if command in JOBS:
        requests = tmp_path / "events" / "requests"
        requests.mkdir(parents=True)
        row = {"ts_ms": 1, "broker": "0", "listener": "PLAINTEXT", "user": "u", "client_id": "c", "client_ip": "1",
               "api_key": 0, "api_version": 9, "request_bytes": 1, "response_bytes": 1, "io_thread_ns": 1,
               "network_thread_ns": 1, "acks": 1, "is_follower": False, "seq": 0}
        (requests / "part.jsonl").write_text(json.dumps(row) + "\n")
        command = [*command, "--events", str(tmp_path / "events"), "--out", str(tmp_path / "out")]
    started = time.monotonic()
    result = CliRunner().invoke(cli, [*command, "--store", "kafka://127.0.0.1:1/q?request.timeout.ms=1500"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "KafkaTimeoutError" not in result.output
    lines = result.output.splitlines()
    assert len(lines) == 2, result.output
    assert lines[0] == ("Connecting to the quota store kafka://127.0.0.1:1/q (bootstrap 127.0.0.1:1); waiting up "
                        "to 1.5 s (request.timeout.ms=1500)..."), lines
    assert lines[1] == ("Error: quota store kafka://127.0.0.1:1/q: no broker reachable at 127.0.0.1:1 within 1.5 s "
                        "(request.timeout.ms=1500, the store URL's setting that bounds the wait)"), lines
    # 1.5 s of request.timeout.ms plus a CLI's start-up, which alone takes seconds on a loaded machine; a CLI that
    # ignored the setting would wait for the store's default (30 s) and fail this
    assert time.monotonic() - started < 25
    assert result.stdout == ""  # both lines on stderr: a script reading stdout gets nothing


def test_missing_store_for_reading_commands(tmp_path: Path, events: Path) -> None:
    missing = str(tmp_path / "missing.db")
    for args in commands(missing, events, tmp_path / "out"):
        if {"--describe", "--resolve", "list", "remove", "replay", "backtest", "copy"} & set(args):
            _one_line_failure(run(*args), "does not exist")
    assert not Path(missing).exists()


def test_store_copy_between_sqlite_files(tmp_path: Path) -> None:
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    with open_store(a) as src:
        src.alter([(QuotaEntity(user="alice"), {"producer_byte_rate": 1000.0, "request_percentage": 50.0}),
                   (QuotaEntity(ip="1.2.3.4"), {"connection_creation_rate": 5.0})])
        src.put_credential(Credential("alice", b"salt" * 4, 1000, b"derived-key"))
    result = run("store", "copy", str(a), f"sqlite:///{b}")
    assert result.exit_code == 0, result.output
    assert result.output == f"Copied 2 entities and 1 users from {a} to {b}\n"
    with open_store(a) as src, open_store(b) as dst:
        assert dst.snapshot().entities == src.snapshot().entities
        assert dst.get_credential("alice") == src.get_credential("alice")
        src.alter([(QuotaEntity(user="alice"), {"request_percentage": None})])
        src.delete_credential("alice")
        dst.alter([(QuotaEntity(client_id="extra"), {"producer_byte_rate": 1.0})])
    _one_line_failure(run("store", "copy", str(a), str(b)), "not empty")
    result = run("store", "copy", str(a), str(b), "--overwrite")
    assert result.exit_code == 0 and "removed 1 entities and 1 users" in result.output, result.output
    with open_store(a) as src, open_store(b) as dst:
        assert dst.snapshot().entities == src.snapshot().entities == {
            QuotaEntity(user="alice"): {"producer_byte_rate": 1000.0},
            QuotaEntity(ip="1.2.3.4"): {"connection_creation_rate": 5.0},
        }
        assert dst.list_credentials() == []
    _one_line_failure(run("store", "copy", str(a), f"sqlite:///{a}"), "same store")
