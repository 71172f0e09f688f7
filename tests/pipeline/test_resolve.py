from __future__ import annotations

from pathlib import Path

import pytest

from quotaflow.core.errors import StoreError
from quotaflow.core.precedence import quota_limit, quota_tags
from quotaflow.core.sanitize import sanitize
from quotaflow.pipeline.resolve import QUOTA_TYPES, load_config, resolve_clients


def test_resolution_matches_core_precedence(quota_store: Path) -> None:
    config = load_config(quota_store)
    assert config.types["produce"].mask == 2 | 4  # user-shaped and (user, client)-shaped entities
    assert config.types["request"].mask == 2 | 1
    assert config.ip_rates == {None: 50, "10.0.1.1": 5}
    pairs = [("tenant-0000", "a"), ("tenant-0003", "tenant-0003-app-0"), ("tenant-0003", "x"),
             ("a b", ""), ("tenant-0000", "b")]  # fmt: skip
    res = resolve_clients(config, pairs).to_pylist()
    assert [(r["user"], r["client_id"]) for r in res] == sorted(set(pairs))
    for r in res:
        for t in QUOTA_TYPES:
            tc = config.types[t]
            tags = quota_tags(tc.overrides, tc.mask, sanitize(r["user"]), r["client_id"])
            assert (r[f"{t}_tag_user"], r[f"{t}_tag_client_id"]) == tags
            assert r[f"{t}_limit"] == quota_limit(tc.overrides, *tags)
    by = {(r["user"], r["client_id"]): r for r in res}
    assert by[("tenant-0003", "tenant-0003-app-0")]["produce_limit"] == 1e5
    assert by[("tenant-0003", "x")]["produce_limit"] == 3e5  # <default> user
    assert by[("a b", "")]["produce_tag_user"] == "a%20b"  # sanitized user tag
    # one user quota shared by both of tenant-0000's clients: same quota-id
    assert by[("tenant-0000", "a")]["produce_qid"] == by[("tenant-0000", "b")]["produce_qid"]


def test_missing_store_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        load_config(tmp_path / "none.db")


def test_components_keep_shared_quota_ids_together(quota_store: Path) -> None:
    from quotaflow.pipeline.resolve import components

    config = load_config(quota_store)
    pairs = [("tenant-0000", "a"), ("tenant-0000", "b"), ("u1", "shared"), ("u2", "shared"), ("u3", "solo")]
    res = resolve_clients(config, pairs)
    comp = components(res)
    rows = res.to_pylist()
    for t in QUOTA_TYPES:  # any two rows with the same quota-id of any type are in one component
        for i, a in enumerate(rows):
            for j, b in enumerate(rows):
                if a[f"{t}_qid"] == b[f"{t}_qid"]:
                    assert comp[i] == comp[j]
    by = {(r["user"], r["client_id"]): c for r, c in zip(rows, comp, strict=True)}
    assert by[("tenant-0000", "a")] == by[("tenant-0000", "b")]  # tenant-0000's user quota
    assert by[("u1", "shared")] == by[("u2", "shared")]  # request quota on <default> client-id: tags ("", client)
