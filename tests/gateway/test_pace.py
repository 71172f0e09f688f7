"""Describes of every ACL and every entity work in bounded steps with a pace between them (``collector.Pace``): the
executor thread gives up the GIL and the CPU between steps, so a preemption by the operating system mostly lands
where it holds no GIL (the round trips it cost are in bench/control_plane_scale.py). Counted, not timed: the work
done between two calls of the pace, and the bytes, the same as the unpaced encode's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import DescribeClientQuotasRequest

from quotaflow.admin.acls import PACE_STEP, SORT_RUN, AclAdmin, sort_bindings
from quotaflow.admin.local import Admin
from quotaflow.core.acl import (
    ANY_FILTER,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from quotaflow.core.authorizer import AclIndex
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.filters import QuotaFilter
from quotaflow.gateway import collector
from quotaflow.gateway.auth.acl_admin import AclAdminHandler
from quotaflow.gateway.data.quota_admin import QuotaAdminHandler
from quotaflow.gateway.wire import acl_entries
from quotaflow.gateway.wire.acl_entries import encode_describe_acls_response
from quotaflow.gateway.wire.quota_entries import encode_describe_response
from quotaflow.store.sqlite import SqliteStore

BINDINGS = 3_000


def binding(i: int) -> AclBinding:
    # two entries per topic: resources group several bindings
    return AclBinding(ResourcePattern(ResourceType.TOPIC, f"tenant-{i // 2}", PatternType.LITERAL),
                      AccessControlEntry(f"User:t{i % 7}", "*", AclOperation.WRITE if i % 2 else AclOperation.READ,
                                         AclPermissionType.ALLOW))


class Steps:
    """A pace that records, at each call, how much of each counted kind of work was done since the last call."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.steps: list[dict[str, int]] = []

    def count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def __call__(self) -> None:
        self.steps.append(self.counts)
        self.counts = {}

    def most(self, kind: str) -> int:
        return max(step.get(kind, 0) for step in [*self.steps, self.counts])


def test_pace_naps_only_after_its_burst(monkeypatch: pytest.MonkeyPatch) -> None:
    napped: list[float] = []
    monkeypatch.setattr(collector.time, "sleep", napped.append)
    eager = collector.Pace(burst_s=0.0)
    for _ in range(5):
        eager()
    assert eager.naps == 5 and napped == [collector.PACE_NAP_S] * 5
    patient = collector.Pace(burst_s=3600.0)
    for _ in range(5):
        patient()
    assert patient.naps == 0 and len(napped) == 5


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_describe_of_every_acl_works_in_bounded_steps(version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Matching, sorting (runs, then the merge), encoding and freeing: between two calls of the pace at most
    ``PACE_STEP`` bindings taken from the index, ``SORT_RUN`` sort keys computed and one resource encoded. Before,
    each step ran whole (100,000 bindings at a time) and nothing was called between them."""
    index = AclIndex(binding(i) for i in range(BINDINGS))
    expected = encode_describe_acls_response(version, 9, sort_bindings(list(index.matching(ANY_FILTER))))
    steps = Steps()
    matching, sort_key, resource = AclIndex.matching, AclBinding.sort_key, acl_entries._Encoder.resource

    def counted_matching(self: AclIndex, acl_filter: Any) -> Iterator[AclBinding]:
        for b in matching(self, acl_filter):
            steps.count("matched")
            yield b

    def counted_key(self: AclBinding) -> Any:
        steps.count("keys")
        return sort_key(self)

    def counted_resource(self: Any, group: Any, out: list[bytes]) -> None:
        steps.count("resources")
        resource(self, group, out)

    monkeypatch.setattr(AclIndex, "matching", counted_matching)
    monkeypatch.setattr(AclBinding, "sort_key", counted_key)
    monkeypatch.setattr(acl_entries._Encoder, "resource", counted_resource)

    class NoStore:
        pass

    handler = AclAdminHandler(AclAdmin(NoStore()), object(), None, sync=lambda: index)  # type: ignore[arg-type]
    encoded = handler.describe_encoded(version, ANY_FILTER, 9, steps)
    assert encoded == expected
    assert sum(s.get("matched", 0) for s in steps.steps) == BINDINGS
    assert steps.most("matched") <= PACE_STEP
    assert steps.most("keys") <= SORT_RUN
    assert steps.most("resources") <= 1
    assert len(steps.steps) >= BINDINGS // 2  # one call per resource at least


def test_describe_of_every_entity_works_in_bounded_steps(tmp_path: Path) -> None:
    """DescribeClientQuotas of every entity: the pace called after each entity encoded and between the matching
    steps; the same bytes as the unpaced encode. Before, nothing was called between entities."""
    entities = 1_500
    with SqliteStore(tmp_path / "q.db") as store:
        store.alter([(QuotaEntity(user=f"u{i}", client_id=f"c{i}"), {"producer_byte_rate": 1000.0 + i})
                     for i in range(entities)])
        admin = Admin(store)
        handler = QuotaAdminHandler(admin, None)
        request = DescribeClientQuotasRequest[1](components=[], strict=False)
        expected = encode_describe_response(1, 4, admin.describe(QuotaFilter()))
        steps = Steps()
        assert handler.describe_encoded(1, request, True, 4, steps) == expected
        # one call per entity encoded, one per entity freed chunk, one per matching step
        assert len(steps.steps) >= entities + entities // PACE_STEP
