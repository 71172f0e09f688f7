from __future__ import annotations

import pytest

from quotaflow.gateway.sasl import (
    PlainMessage,
    SaslAuthenticationError,
    authenticate_plain,
    hash_password,
    verify_password,
)
from quotaflow.store.base import Credential

FAST = 1000  # iterations: keeps the tests quick; the default is the slow production setting


def test_hash_is_salted_and_verifies() -> None:
    a = hash_password("alice", "s3cret", iterations=FAST)
    b = hash_password("alice", "s3cret", iterations=FAST)
    assert a.salt != b.salt and a.hash != b.hash
    assert a.user == "alice" and a.iterations == FAST
    assert verify_password(a, "s3cret") and verify_password(b, "s3cret")
    assert not verify_password(a, "s3cret ") and not verify_password(a, "")


def test_default_iterations_are_slow() -> None:
    assert hash_password("u", "p").iterations >= 100_000


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(b"\x00alice\x00pw", ("", "alice", "pw")), (b"alice\x00alice\x00pw", ("alice", "alice", "pw"))],
)
def test_plain_message_parses(raw: bytes, expected: tuple[str, str, str]) -> None:
    m = PlainMessage.parse(raw)
    assert (m.authzid, m.username, m.password) == expected


@pytest.mark.parametrize(
    "raw", [b"alice\x00pw", b"\x00\x00pw", b"\x00alice\x00", b"bob\x00alice\x00pw", b"\xff\x00a\x00b"]
)
def test_plain_message_rejects(raw: bytes) -> None:
    with pytest.raises(SaslAuthenticationError):
        PlainMessage.parse(raw)


class _Creds:
    def __init__(self, *creds: Credential) -> None:
        self.creds = {c.user: c for c in creds}

    def get_credential(self, user: str) -> Credential | None:
        return self.creds.get(user)


def test_authenticate_plain() -> None:
    store = _Creds(hash_password("alice", "pw", iterations=FAST))
    assert authenticate_plain(store, b"\x00alice\x00pw") == "alice"  # type: ignore[arg-type]
    for bad in (b"\x00alice\x00nope", b"\x00mallory\x00pw"):
        with pytest.raises(SaslAuthenticationError, match="Invalid username or password"):
            authenticate_plain(store, bad)  # type: ignore[arg-type]
