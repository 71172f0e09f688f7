"""KIP-554 over the gateway's own credential store: Kafka's validation, errors and messages, and credentials that
are exactly what ``quotaflow users add`` would have stored for the same salt and password."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest

from quotaflow.gateway.auth.scram_admin import ScramAdmin
from quotaflow.store import open_store
from quotaflow.store.base import ScramStore
from quotaflow.store.scram import scram_credential

SALT = b"0123456789abcdef"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Any]:
    with open_store(tmp_path / "q.db") as s:
        assert isinstance(s, ScramStore)
        s.put_scram_credential(scram_credential("alice", "SCRAM-SHA-256", "a", iterations=4096))
        s.put_scram_credential(scram_credential("alice", "SCRAM-SHA-512", "a", iterations=8192))
        yield s


def _upsert(name: str, mechanism: int, iterations: int, password: bytes = b"pw", salt: bytes = SALT) -> Any:
    digest = {1: "sha256", 2: "sha512"}.get(mechanism, "sha256")
    salted = hashlib.pbkdf2_hmac(digest, password, salt, max(iterations, 1))
    return AlterUserScramCredentialsRequest.ScramCredentialUpsertion(name=name, mechanism=mechanism,
                                                                     iterations=iterations, salt=salt,
                                                                     salted_password=salted)


def _delete(name: str, mechanism: int) -> Any:
    return AlterUserScramCredentialsRequest.ScramCredentialDeletion(name=name, mechanism=mechanism)


def _alter(admin: ScramAdmin, deletions: list[Any], upsertions: list[Any], allowed: bool = True) -> dict[str, Any]:
    request = AlterUserScramCredentialsRequest[0](deletions=deletions, upsertions=upsertions)
    return {r.user: (r.error_code, r.error_message) for r in admin.alter(0, request, allowed).results}


def _describe(admin: ScramAdmin, users: list[str] | None, allowed: bool = True) -> Any:
    names = None if users is None else [DescribeUserScramCredentialsRequest.UserName(name=u) for u in users]
    return admin.describe(0, DescribeUserScramCredentialsRequest[0](users=names), allowed)


def test_an_upsertion_stores_kafkas_scram_credential(store: Any) -> None:
    admin = ScramAdmin(store)
    assert _alter(admin, [], [_upsert("carol", 2, 4096, b"carol-pw")]) == {"carol": (0, None)}
    expected = scram_credential("carol", "SCRAM-SHA-512", "carol-pw", iterations=4096, salt=SALT)
    assert store.get_scram_credential("carol", "SCRAM-SHA-512") == expected


def test_describe_lists_users_with_scram_credentials(store: Any) -> None:
    admin = ScramAdmin(store)
    described = _describe(admin, None)
    assert described.error_code == 0
    assert [(r.user, [(i.mechanism, i.iterations) for i in r.credential_infos]) for r in described.results] == \
        [("alice", [(1, 4096), (2, 8192)])]
    named = _describe(admin, ["alice", "nobody", "alice"])
    assert [(r.user, r.error_code, r.error_message) for r in named.results] == [
        ("alice", 92, "Cannot describe SCRAM credentials for the same user twice in a single request: alice"),
        ("nobody", 91, "Attempt to describe a user credential that does not exist: nobody")]


def test_kafkas_validation_and_messages(store: Any) -> None:
    admin = ScramAdmin(store)
    results = _alter(admin, [_delete("ghost", 1), _delete("eve", 7)], [
        _upsert("few", 1, 4095), _upsert("many", 1, 16385), _upsert("mech", 3, 4096), _upsert("", 1, 4096),
        _upsert("twice", 1, 4096), _upsert("twice", 1, 8192), _upsert("ok", 1, 16384)])
    assert results == {
        "ghost": (91, "Attempt to delete a user credential that does not exist"),
        "eve": (33, "Unknown SCRAM mechanism"),
        "few": (93, "Too few iterations"),
        "many": (93, "Too many iterations"),
        "mech": (33, "Unknown SCRAM mechanism"),
        "": (93, "Username must not be empty"),
        "twice": (92, "A user credential cannot be altered twice in the same request"),
        "ok": (0, None),
    }
    assert store.get_scram_credential("twice", "SCRAM-SHA-256") is None  # nothing applied for a refused user
    assert store.get_scram_credential("ok", "SCRAM-SHA-256") is not None


def test_a_deletion_removes_one_mechanism(store: Any) -> None:
    admin = ScramAdmin(store)
    assert _alter(admin, [_delete("alice", 1)], []) == {"alice": (0, None)}
    assert store.get_scram_credential("alice", "SCRAM-SHA-256") is None
    assert store.get_scram_credential("alice", "SCRAM-SHA-512") is not None


def test_refused_without_describe_or_alter_on_the_cluster(store: Any) -> None:
    admin = ScramAdmin(store)
    # Kafka's getErrorResponse: ApiError.fromThrowable sends the generic error's message as null
    assert _alter(admin, [_delete("alice", 1)], [_upsert("bob", 1, 4096)], allowed=False) == {
        "alice": (31, None), "bob": (31, None)}
    assert store.get_scram_credential("alice", "SCRAM-SHA-256") is not None
    refused = _describe(admin, ["alice", "bob"], allowed=False)
    assert (refused.error_code, refused.error_message) == (31, None)
    assert [(r.user, r.error_code, r.error_message, r.credential_infos) for r in refused.results] == [
        ("", 31, None, [])] * 2  # one per named user, the name left at its default


@pytest.mark.broker
def test_a_kafka_store_deletes_one_mechanism(tansu: Any) -> None:
    import uuid

    from quotaflow.store.kafka import KafkaStore

    with KafkaStore(f"kafka://{tansu.bootstrap}/scram-{uuid.uuid4().hex[:8]}") as kafka_store:
        admin = ScramAdmin(kafka_store)
        assert _alter(admin, [], [_upsert("dora", 1, 4096), _upsert("dora", 2, 4096)]) == {"dora": (0, None)}
        assert _alter(admin, [_delete("dora", 2)], []) == {"dora": (0, None)}
        assert kafka_store.get_scram_credential("dora", "SCRAM-SHA-512") is None
        assert kafka_store.get_scram_credential("dora", "SCRAM-SHA-256") is not None
        assert _alter(admin, [_delete("dora", 2)], []) == {
            "dora": (91, "Attempt to delete a user credential that does not exist")}
