"""``quotaflow users``: credentials land in the store as verifiable salted hashes; add/remove/list round trip."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from quotaflow.cli.main import cli
from quotaflow.gateway.auth.sasl import verify_password
from quotaflow.store import open_store


def run(*args: str, stdin: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), input=stdin)
    return result.exit_code, result.output


def test_add_list_remove(tmp_path: Path) -> None:
    store = str(tmp_path / "q.db")
    assert run("users", "add", "bob", "--password", "pw-b", "--store", store) == (0, "Added user bob\n")
    assert run("users", "add", "alice", "--store", store, stdin="pw-a\n") == (0, "Added user alice\n")
    assert run("users", "list", "--store", store) == (0, "alice\nbob\n")
    assert run("users", "add", "bob", "--password", "pw-b2", "--store", store) == (0, "Updated user bob\n")
    qs = open_store(store)
    try:
        alice, bob = qs.get_credential("alice"), qs.get_credential("bob")
        assert alice is not None and bob is not None
        assert verify_password(alice, "pw-a") and not verify_password(alice, "pw-a\n")
        assert verify_password(bob, "pw-b2") and not verify_password(bob, "pw-b")
        assert b"pw-b2" not in bob.hash and bob.salt != alice.salt
    finally:
        qs.close()
    assert run("users", "remove", "bob", "--store", store) == (0, "Removed user bob\n")
    code, out = run("users", "remove", "bob", "--store", store)
    assert code == 1 and "no such user: bob" in out
    assert run("users", "list", "--store", store) == (0, "alice\n")


def test_empty_password_is_refused(tmp_path: Path) -> None:
    store = str(tmp_path / "q.db")
    code, out = run("users", "add", "carol", "--store", store, stdin="\n")
    assert code == 2 and "must not be empty" in out
    assert run("users", "list", "--store", store) == (1, f"Error: quota store {store} does not exist\n")  # not created


def test_scram_iterations_within_kafkas_bounds(tmp_path: Path) -> None:
    """4096..16384 as Kafka's ScramMechanism: a credential a Kafka controller would refuse is not stored either."""
    store = str(tmp_path / "q.db")
    code, out = run("users", "add", "dan", "--password", "pw", "--iterations", "16385", "--store", store)
    assert code == 1 and "Iterations 16385 is more than the maximum 16384 allowed for SCRAM-SHA-256" in out
    code, out = run("users", "add", "dan", "--password", "pw", "--iterations", "4095", "--store", store)
    assert code == 1 and "Iterations 4095 is less than the minimum 4096 required for SCRAM-SHA-256" in out
    assert run("users", "add", "dan", "--password", "pw", "--iterations", "16384", "--store", store) == (
        0, "Added user dan\n")
