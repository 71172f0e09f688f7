"""A ``quotaflow recommend`` output on the backtest page: the proposal beside the store's current quotas, with its
backtest per entity, and applying all of it or the entities an admin picks.

The proposal is read from the output's own ``proposal.json`` on the server; a client names only which entries to
apply (their indexes), never values, so what is applied is what the advisor proposed and the page showed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import pyarrow.dataset as ds

from quotaflow.admin import AdminBackend, Alteration
from quotaflow.admin.batch import alterations_from_json, apply, changes_to_json, current_values
from quotaflow.console.backtests import Backtest
from quotaflow.core.errors import CommandError, InvalidRequestError

PROPOSAL_FILE: Final = "proposal.json"
OUTCOME_DIR: Final = "outcome"


def has_proposal(b: Backtest) -> bool:
    return (b.path / PROPOSAL_FILE).is_file()


def alterations(b: Backtest) -> list[Alteration]:
    if not has_proposal(b):
        raise CommandError(f"{b.id} is not a `quotaflow recommend` output (no {PROPOSAL_FILE})")
    return alterations_from_json(json.loads((b.path / PROPOSAL_FILE).read_text(encoding="utf-8")), PROPOSAL_FILE)


def _outcomes(b: Backtest) -> dict[tuple[str | None, str | None, str | None], dict[str, Any]]:
    if not b.has(OUTCOME_DIR):
        return {}
    rows = ds.dataset(b.path / OUTCOME_DIR, format="parquet").to_table().to_pylist()
    return {(r["entity_user"], r["entity_client_id"], r.get("entity_client_id_prefix")): r for r in rows}


def proposal(b: Backtest, backend: AdminBackend) -> dict[str, Any] | None:
    """Per entry of the proposal: the entity, each key's current (the store now) and proposed value, and the
    entity's throttling before/after from the proposal's backtest; entries with the biggest change first."""
    if not has_proposal(b):
        return None
    outcomes = _outcomes(b)
    entries: list[dict[str, Any]] = []
    for i, a in enumerate(alterations(b)):
        now = current_values(backend, a.entity)
        out = outcomes.get((a.entity.get("user"), a.entity.get("client-id"), a.entity.get("client-id-prefix")), {})
        entries.append({
            "index": i, "entity": dict(a.entity),
            "values": [{"key": op.key, "current": now.get(op.key or ""), "proposed": op.value} for op in a.ops],
            "changed": sum(now.get(op.key or "") != op.value for op in a.ops),
            "outcome": {k: out.get(k) for k in ("requests", "throttle_s_before", "throttle_s_after",
                                                "throttled_seconds_before", "throttled_seconds_after",
                                                "delayed_bytes_before", "delayed_bytes_after", "throttle_s_delta")},
        })  # fmt: skip
    entries.sort(key=lambda e: (-abs(e["outcome"].get("throttle_s_delta") or 0.0), e["index"]))
    return {"entries": entries, "count": len(entries)}


def apply_entries(b: Backtest, backend: AdminBackend, indexes: Sequence[int] | None,
                  validate_only: bool) -> list[dict[str, object]]:  # fmt: skip
    """Apply the chosen entries (all when ``indexes`` is None), each entity all-or-nothing, as
    ``client-quotas --alter --from-file``."""
    found = alterations(b)
    if indexes is None:
        chosen = found
    else:
        if not indexes or any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(found)
                              for i in indexes):  # fmt: skip
            raise InvalidRequestError(f"entries must be a non-empty list of indexes 0..{len(found) - 1}")
        chosen = [found[i] for i in sorted(set(indexes))]
    return changes_to_json(apply(backend, chosen, validate_only))
