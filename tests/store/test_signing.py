"""Signed records (issue 22.8), the pure part: what the MAC covers, key files and rotation, replays, and a store
view that applies only signed records and counts the rest."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from quotaflow.core.entities import QuotaEntity
from quotaflow.core.errors import StoreError
from quotaflow.store.base import Credential
from quotaflow.store.records import StoreView, acl_record, credential_record, credential_tombstone, quota_record
from quotaflow.store.signing import (
    OFFSET_HEADER,
    REPLAY_WINDOW_MS,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    RecordSigner,
    ReplayGuard,
)

OLD = b"old-fleet-key-0123456789abcdef-0123456789"
NEW = b"new-fleet-key-0123456789abcdef-0123456789"
T = "__quotaflow_quotas"
ALICE = QuotaEntity(user="alice")


def test_every_part_of_the_record_is_covered() -> None:
    signer = RecordSigner([NEW])
    headers = signer.sign(T, b"k", b"v", 1000)
    assert {name for name, _ in headers} == {SIGNATURE_HEADER, TIMESTAMP_HEADER}
    assert signer.verify(T, b"k", b"v", headers).ts_ms == 1000
    for topic, key, value in [("other", b"k", b"v"), (T, b"K", b"v"), (T, b"k", b"V"), (T, b"k", None),
                              (T, None, b"v")]:
        assert signer.verify(topic, key, value, headers).error is not None, (topic, key, value)
    redated = [(SIGNATURE_HEADER, headers[0][1]), (TIMESTAMP_HEADER, (2000).to_bytes(8, "big"))]
    assert signer.verify(T, b"k", b"v", redated).error is not None
    tombstone = signer.sign(T, b"k", None, 5)
    assert signer.verify(T, b"k", None, tombstone).ts_ms == 5
    assert signer.verify(T, b"k", b"", tombstone).error is not None  # null and empty are different records
    assert signer.verify(T, b"k", b"v", []).error == "unsigned record"
    at = signer.sign(T, b"k", b"v", 1000, 7)
    assert signer.verify(T, b"k", b"v", at).offset == 7
    moved = [(n, (8).to_bytes(8, "big") if n == OFFSET_HEADER else v) for n, v in at]
    assert signer.verify(T, b"k", b"v", moved).error is not None  # the offset is covered: it cannot be changed
    unbound = [(n, v) for n, v in at if n != OFFSET_HEADER]
    assert signer.verify(T, b"k", b"v", unbound).error is not None  # nor dropped


def test_rotation_the_first_key_signs_every_key_verifies(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"# the fleet's keys, newest first\n{NEW.decode()}\n\n{OLD.decode()}\n")
    rotated = RecordSigner.from_file(keys)
    assert rotated.keys == (NEW, OLD)
    by_old = RecordSigner([OLD]).sign(T, b"k", b"v", 1)
    assert rotated.verify(T, b"k", b"v", by_old).ts_ms == 1  # records signed before the rotation still apply
    by_new = rotated.sign(T, b"k", b"v", 2)
    assert RecordSigner([NEW]).verify(T, b"k", b"v", by_new).ts_ms == 2
    assert RecordSigner([OLD]).verify(T, b"k", b"v", by_new).error is not None


def test_key_files_are_checked(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("secret\n")
    with pytest.raises(StoreError, match="shorter than 32"):
        RecordSigner.from_file(short)
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    with pytest.raises(StoreError, match="no key"):
        RecordSigner.from_file(empty)
    with pytest.raises(StoreError, match="cannot read the signing key file"):
        RecordSigner.from_file(tmp_path / "missing")


def test_replays_older_than_the_window_are_refused_and_writers_stamp_forward() -> None:
    guard = ReplayGuard()
    assert guard.admit(1_000_000) is None
    assert guard.admit(1_000_000 - REPLAY_WINDOW_MS) is None  # within the window: concurrent writers' skew
    assert guard.admit(1_000_000 - REPLAY_WINDOW_MS - 1) is not None
    assert guard.stamp(0) == 1_000_001  # a writer with a slow clock still writes after what it read
    assert guard.stamp(2_000_000) == 2_000_000


def _signed(signer: RecordSigner, record: tuple[bytes, bytes | None], ts: int, offset: int
            ) -> tuple[bytes, bytes | None, list[tuple[str, bytes]]]:
    key, value = record
    return key, value, signer.sign(T, key, value, ts, offset)


def test_a_signed_view_applies_only_signed_fresh_records(caplog: pytest.LogCaptureFixture) -> None:
    signer = RecordSigner([NEW, OLD])
    view = StoreView("test", signer=signer, topic=T)
    view.apply(0, *_signed(signer, quota_record(ALICE, {"producer_byte_rate": 1000.0}, 1), 10_000_000, 0))
    admin = Credential("admin", b"salt", 1000, b"hash")
    view.apply(1, *_signed(signer, credential_record(admin), 10_000_001, 1))
    with caplog.at_level(logging.WARNING):
        # a writer without the key: a quota raised, the admin's credential replaced, the admin deleted
        view.apply(2, *quota_record(ALICE, {"producer_byte_rate": 2e9}, 2))
        view.apply(3, *credential_record(Credential("admin", b"mine", 1000, b"my-hash")))
        view.apply(4, *credential_tombstone("admin"))
        # signed with a key this view does not hold
        view.apply(5, *_signed(RecordSigner([b"x" * 40]), quota_record(ALICE, {"producer_byte_rate": 3e9}, 3), 10**7,
                               5))
        # a replay of the first record (validly signed) after a change an hour later
        view.apply(6, *_signed(signer, quota_record(ALICE, {"producer_byte_rate": 500.0}, 4), 10_000_000 + 3_600_000,
                               6))
        view.apply(7, *_signed(signer, quota_record(ALICE, {"producer_byte_rate": 1000.0}, 1), 10_000_000, 0))
    assert view.entities == {ALICE: {"producer_byte_rate": 500.0}}
    assert view.credentials == {"admin": admin}
    assert view.rejected == 5 and view.position == 8
    lines = [r for r in caplog.records if "skipped the record" in r.getMessage()]
    assert len(lines) == 1 and "unsigned record" in lines[0].getMessage()  # rate-limited: one line, not five


def test_a_forged_acl_grant_is_refused() -> None:
    """The store topic holds ACLs too: an ALLOW for everyone on everything, written without the key, is no ACL."""
    from quotaflow.core.acl import (
        AccessControlEntry,
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourcePattern,
        ResourceType,
    )

    signer = RecordSigner([NEW])
    grant = AclBinding(ResourcePattern(ResourceType.TOPIC, "*", PatternType.LITERAL),
                       AccessControlEntry("User:bob", "*", AclOperation.ALL, AclPermissionType.ALLOW))
    view = StoreView("test", signer=signer, topic=T)
    view.apply(0, *acl_record(grant, 1))
    assert view.acls == set() and view.rejected == 1
    view.apply(1, *_signed(signer, acl_record(grant, 2), 1, 1))
    assert view.acls == {grant}


def test_without_a_signer_nothing_changes() -> None:
    view = StoreView()
    view.apply(0, *quota_record(ALICE, {"producer_byte_rate": 1000.0}, 1))
    assert view.entities == {ALICE: {"producer_byte_rate": 1000.0}} and view.rejected == 0


# -- replays (issue 34.5): a signed record applies only at the offset it was signed for ----------------------------

class _Log:
    """A topic's one partition as the pure view sees it: records appended in order, each at the next offset, signed
    (as :class:`~quotaflow.store.kafka.KafkaStore` signs) for the offset it lands at; ``raw`` keeps what any
    reader of the topic can copy."""

    def __init__(self, signer: RecordSigner) -> None:
        self.signer = signer
        self.raw: list[tuple[bytes, bytes | None, list[tuple[str, bytes]]]] = []

    def write(self, record: tuple[bytes, bytes | None], ts: int) -> int:
        offset = len(self.raw)
        self.raw.append(_signed(self.signer, record, ts, offset))
        return offset

    def replay(self, offset: int) -> None:
        """What a principal with WRITE on the topic and no key does: append a copy of an earlier record."""
        self.raw.append(self.raw[offset])

    def view(self, compacted: bool = False) -> StoreView:
        """A fresh reader (a restarted gateway, a CLI) of the whole log, or of what compaction keeps of it (the
        last record per key, offsets unchanged; tombstones removed too, as after delete.retention.ms)."""
        view = StoreView("test", signer=self.signer, topic=T)
        last = {key: offset for offset, (key, _v, _h) in enumerate(self.raw)}
        for offset, (key, value, headers) in enumerate(self.raw):
            if compacted and (last[key] != offset or value is None):
                continue
            view.apply(offset, key, value, headers)
        view.advance(len(self.raw))
        return view


def test_a_replayed_quota_is_refused_immediately_after_a_newer_one_and_on_a_quiet_store() -> None:
    signer = RecordSigner([NEW])
    log_ = _Log(signer)
    high = log_.write(quota_record(ALICE, {"producer_byte_rate": 9e9}, 1), 1_000)
    log_.replay(high)  # (a) immediately: the same value, but a record that applies twice is a replay all the same
    assert log_.view().rejected == 1
    low = log_.write(quota_record(ALICE, {"producer_byte_rate": 1000.0}, 2), 1_001)
    log_.replay(high)  # (b) after a newer one, within a second by the writers' clocks
    view = log_.view()
    assert view.entities == {ALICE: {"producer_byte_rate": 1000.0}} and view.rejected == 2
    # (d) a quiet store: the last write an hour of signed time ago; the newest record is itself copied, and the
    # window of the old guard (measured from the newest record read) would have let both copies in
    log_.replay(high)
    log_.replay(low)
    view = log_.view()
    assert view.entities == {ALICE: {"producer_byte_rate": 1000.0}} and view.rejected == 4
    assert [c.value for c in view.changes] == [9e9, 1000.0]  # the change log holds no replayed change either


def test_a_replayed_set_after_a_delete_does_not_resurrect_an_acl_or_a_credential() -> None:
    from quotaflow.core.acl import (
        AccessControlEntry,
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourcePattern,
        ResourceType,
    )

    signer = RecordSigner([NEW])
    log_ = _Log(signer)
    grant = AclBinding(ResourcePattern(ResourceType.TOPIC, "*", PatternType.LITERAL),
                       AccessControlEntry("User:bob", "*", AclOperation.ALL, AclPermissionType.ALLOW))
    old_password = Credential("admin", b"salt", 1000, b"old-hash")
    granted = log_.write(acl_record(grant, 1), 1)
    set_old = log_.write(credential_record(old_password), 2)
    log_.write(acl_record(grant, None), 3)  # the grant deleted
    log_.write(credential_tombstone("admin"), 4)  # the admin deleted ...
    new_password = Credential("admin", b"salt2", 1000, b"new-hash")
    log_.write(credential_record(new_password), 5)  # ... and created again with another password
    log_.replay(granted)
    log_.replay(set_old)
    view = log_.view()
    assert view.acls == set() and view.credentials == {"admin": new_password} and view.rejected == 2
    # compacted (tombstones gone after delete.retention.ms): still no grant, and never the old password (the copy,
    # now the last record of its key, took the new one with it: a drop, not a replay)
    view = log_.view(compacted=True)
    assert view.acls == set() and view.credentials == {} and view.rejected == 2


def test_a_replay_that_compaction_keeps_as_the_last_record_of_its_key_still_never_applies() -> None:
    """Compaction keeps the copy (the last record of its key by offset) and drops the original: the key is then
    gone for a reader of the compacted log (dropping records is what any writer of a compacted topic can do, see
    docs/store.md), but the old value is never applied."""
    signer = RecordSigner([NEW])
    log_ = _Log(signer)
    old = log_.write(quota_record(ALICE, {"producer_byte_rate": 9e9}, 1), 1)
    log_.write(quota_record(ALICE, {"producer_byte_rate": 1000.0}, 2), 2)
    log_.replay(old)
    assert log_.view(compacted=False).entities == {ALICE: {"producer_byte_rate": 1000.0}}
    assert log_.view(compacted=True).entities == {}


def test_records_signed_without_an_offset_are_refused_by_the_store() -> None:
    """A record signed as usage reports are (time only) could be replayed: the store applies none."""
    signer = RecordSigner([NEW])
    view = StoreView("test", signer=signer, topic=T)
    key, value = quota_record(ALICE, {"producer_byte_rate": 1.0}, 1)
    view.apply(0, key, value, signer.sign(T, key, value, 1))
    assert view.entities == {} and view.rejected == 1
