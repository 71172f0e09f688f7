"""``quotaflow shadow`` end to end on a real SQLite file: start from a proposal file, status (text and JSON),
promote with its grace, rollback refused then forced, history, stop; one-line errors and exit codes as the other
commands; the store named on stderr when the command line did not name it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from quotaflow.cli.main import cli
from quotaflow.core.entities import QuotaEntity
from quotaflow.store import STORE_ENV
from quotaflow.store.sqlite import SqliteStore

ALICE = QuotaEntity(user="alice")
PROPOSAL = [{"entity": {"user": "alice"}, "values": {"producer_byte_rate": 2000, "consumer_byte_rate": None}},
            {"entity": {"ip": "10.0.0.0/8"}, "values": {"connection_creation_rate": 10}}]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def store(tmp_path: Path) -> str:
    path = tmp_path / "q.db"
    with SqliteStore(path) as s:
        s.alter([(ALICE, {"producer_byte_rate": 1000.0, "consumer_byte_rate": 3000.0})])
    return str(path)


@pytest.fixture
def proposal(tmp_path: Path) -> str:
    path = tmp_path / "proposal.json"
    path.write_text(json.dumps(PROPOSAL))
    return str(path)


def test_the_rollout_loop(store: str, proposal: str) -> None:
    code, out, err = run("shadow", "start", "--from-file", proposal, "--name", "q4", "--by", "ann", "--store", store)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "Started shadow set 1 'q4' by ann: 2 entities, 3 values",
        "  {user=alice}", "    producer_byte_rate: 1000.0 -> 2000.0", "    consumer_byte_rate: 3000.0 -> (removed)",
        "  {ip=10.0.0.0/8}", "    connection_creation_rate: - -> 10.0"]
    code, out, _ = run("shadow", "status", "--store", store)
    assert code == 0 and out.startswith("Shadow set 1 'q4': running since ") and "(started by ann)" in out
    code, out, _ = run("shadow", "status", "--output", "json", "--store", store)
    doc = json.loads(out)
    assert doc["shadow"]["name"] == "q4" and doc["shadow"]["outcome"] == "running" and doc["shadow_version"] == 1
    assert doc["shadow"]["changes"] == [  # the proposal's own shape: it starts the same set again
        {"entity": {"user": "alice"}, "values": {"producer_byte_rate": 2000.0, "consumer_byte_rate": None}},
        {"entity": {"ip": "10.0.0.0/8"}, "values": {"connection_creation_rate": 10.0}}]
    with SqliteStore(store) as s:
        assert s.get(ALICE) == {"producer_byte_rate": 1000.0, "consumer_byte_rate": 3000.0}  # shadow only

    before = time.time_ns() // 1_000_000
    code, out, err = run("shadow", "promote", "--in", "7", "--by", "bob", "--store", store)
    after = time.time_ns() // 1_000_000
    assert (code, err) == (0, "") and out.startswith("Promoted shadow set 1 'q4': 3 values on 2 entities, effective ")
    with SqliteStore(store) as s:
        assert s.get(ALICE) == {"producer_byte_rate": 2000.0}  # the store shows it at once
        (promotion,) = s.promotions()
        assert before + 7000 <= promotion.effective_ms <= after + 7000 and promotion.by == "bob"
        s.alter([(ALICE, {"producer_byte_rate": 2500.0})])  # an operator edits a promoted key

    code, out, err = run("shadow", "rollback", "--store", store)
    assert code == 1 and out == ""
    assert err.splitlines() == ["Error: rollback refused: 1 key(s) that promotion 2 (shadow set 'q4') applied changed "
                                "since ({user=alice} producer_byte_rate: 2000.0 -> 2500.0); restoring them would undo "
                                "those later changes; --force restores them anyway"]
    code, out, err = run("shadow", "rollback", "--force", "--in", "0.1", "--store", store)
    assert code == 0 and out.startswith("Rolled back the promotion of shadow set 1 'q4'")
    assert "Warning: --in 0.1 s is under twice the gateways' quotaflow.store.poll.ms" in err
    with SqliteStore(store) as s:
        assert s.get(ALICE) == {"producer_byte_rate": 1000.0, "consumer_byte_rate": 3000.0}
        assert s.snapshot().entities == {ALICE: {"producer_byte_rate": 1000.0, "consumer_byte_rate": 3000.0}}

    code, out, _ = run("shadow", "history", "--store", store)
    assert code == 0 and out.splitlines()[:3] == ["Shadow sets:", out.splitlines()[1], "Promotions:"]
    assert "1 'q4': started " in out and "promoted " in out and "2 promote of shadow set 1 'q4' by bob" in out
    assert "3 rollback of shadow set 1 'q4' by " in out
    doc = json.loads(run("shadow", "history", "--output", "json", "--store", store)[1])
    assert [s["outcome"] for s in doc["shadow_sets"]] == ["promoted"]
    assert [p["kind"] for p in doc["promotions"]] == ["promote", "rollback"] and doc["promotions"][0]["by"] == "bob"
    assert doc["promotions"][1]["applied"][0] == {"entity": {"user": "alice"},
                                                  "values": {"producer_byte_rate": 1000.0,
                                                             "consumer_byte_rate": 3000.0}}


def test_errors_are_one_line_with_exit_status_1(store: str, proposal: str, tmp_path: Path) -> None:
    for args, message in (
            (("stop",), "Error: no shadow set is running: nothing to stop"),
            (("promote",), "Error: no shadow set is running: nothing to promote (`quotaflow shadow start`)"),
            (("rollback",), "Error: nothing to roll back: no shadow set was ever promoted"),
            (("promote", "--in", "-3"), "Error: --in must be between 0 and 86400 seconds, got -3")):
        code, out, err = run("shadow", *args, "--store", store)
        assert (code, out, err) == (1, "", message + "\n"), args
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"entity": {"user": "x"}, "values": {"producer_byte_rate": -1}}]))
    code, out, err = run("shadow", "start", "--from-file", str(bad), "--name", "n", "--store", store)
    assert (code, out) == (1, "") and err == (f"Error: {bad}: 1 of 1 entities are invalid, the shadow set was not "
                                              f"started (ClientQuotaEntity(entries={{user=x}}): Quota "
                                              f"producer_byte_rate must be greater than 0)\n")
    code, _, err = run("shadow", "start", "--from-file", proposal, "--store", store)  # no --name: a usage error
    assert code == 2 and "Missing option '--name'" in err
    code, out, err = run("shadow", "status", "--store", str(tmp_path / "none.db"))
    assert (code, out) == (1, "") and "does not exist" in err  # reading never creates a store


def test_the_default_store_is_announced(store: str, proposal: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STORE_ENV, store)
    code, out, err = run("shadow", "start", "--from-file", proposal, "--name", "n")
    assert code == 0 and err == f"Using the quota store {store} (from ${STORE_ENV})\n"
    code, out, err = run("shadow", "status")  # reads: silent, as describe is
    assert code == 0 and err == ""
    code, out, err = run("shadow", "stop", "--by", "carl")
    assert (code, out) == (0, "Stopped shadow set 1 'n'\n") and "Using the quota store" in err
    with SqliteStore(store) as s:
        assert s.shadow_sets()[0].ended_by == "carl" and s.shadow_sets()[0].outcome == "stopped"


def test_by_defaults_to_the_os_user(store: str, proposal: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import getpass

    monkeypatch.setattr(getpass, "getuser", lambda: "os-user-7")
    assert run("shadow", "start", "--from-file", proposal, "--name", "n", "--store", store)[0] == 0
    with SqliteStore(store) as s:
        assert s.shadow() is not None and s.shadow().started_by == "os-user-7"  # type: ignore[union-attr]
