"""Shadow records applied to a view (the code every ``kafka://`` reader runs), without a broker: what a reader
refuses, what it skips as a lost race, and a manifest written before shadow sets existed."""

from __future__ import annotations

import json

from quotaflow.core.entities import QuotaEntity
from quotaflow.store.records import Manifest, StoreView, quota_record, shadow_record

ALICE = QuotaEntity(user="alice")


def _view() -> StoreView:
    view = StoreView()
    view.apply(0, *quota_record(ALICE, {"producer_byte_rate": 1000.0}, 1))
    view.apply(1, *shadow_record("start", 2, "ann", name="s", changes=((ALICE, {"producer_byte_rate": 5.0}),)))
    return view


def test_a_promotion_applies_only_what_its_shadow_set_holds() -> None:
    view = _view()
    forged = shadow_record("promote", 3, "eve", shadow=2, effective_ms=0,
                           previous=((ALICE, {"producer_byte_rate": 1000.0}),),
                           applied=((ALICE, {"producer_byte_rate": 9e9}),))
    view.apply(2, *forged)
    assert view.rejected == 1 and view.entities[ALICE] == {"producer_byte_rate": 1000.0} and view.running == 2
    mismatched = shadow_record("promote", 3, "eve", shadow=2, effective_ms=0, previous=((ALICE, {}),),
                               applied=((ALICE, {"producer_byte_rate": 5.0}),))
    view.apply(3, *mismatched)
    assert view.rejected == 2 and view.running == 2


def test_a_record_naming_an_ended_set_is_a_lost_race() -> None:
    view = _view()
    view.apply(2, *shadow_record("stop", 3, "bob", shadow=2))
    late = shadow_record("promote", 4, "ann", shadow=2, effective_ms=0,
                         previous=((ALICE, {"producer_byte_rate": 1000.0}),),
                         applied=((ALICE, {"producer_byte_rate": 5.0}),))
    view.apply(3, *late)
    assert view.rejected == 0 and view.entities[ALICE] == {"producer_byte_rate": 1000.0}
    assert list(view.shadow_results) == [(1, True), (2, True), (3, False)] and view.shadow_version == 3
    assert view.shadows[2].outcome == "stopped" and view.promotions == []


def test_a_start_with_a_quota_the_api_refuses_is_rejected() -> None:
    view = StoreView()
    view.apply(0, *shadow_record("start", 1, "eve", name="x", changes=((ALICE, {"producer_byte_rate": -1.0}),)))
    view.apply(1, *shadow_record("start", 1, "eve", name="x",
                                 changes=((QuotaEntity(ip="1.2.3.4"), {"producer_byte_rate": 1.0}),)))
    view.apply(2, b'["shadow","k"]', json.dumps({"op": "explode", "by": "eve", "ts": 1}).encode())
    assert view.rejected == 3 and view.shadows == {} and view.shadow_version == 0


def test_a_manifest_from_before_shadows_decodes() -> None:
    old = json.dumps({"position": 10, "acl_version": 3, "chunks": [4, 5]}).encode()
    assert Manifest.decode(old) == Manifest(10, 3, (4, 5), 0)
    assert Manifest.decode(Manifest(10, 3, (4,), 9).record()[1]).shadow_version == 9
