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
from quotaflow.console.backtests import Backtest, run_summary
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


USAGE_DIR: Final = "usage"
EVIDENCE: Final = ("current_limit", "current_source", "active_seconds", "throttled_share", "lifts", "warning")
"""What usage/ says about a proposed value: the quota in force when it was computed (and the entity that supplied
it), the seconds the entity was active and throttled, whether it lifts the quota in force, why to look twice."""

Names = tuple[str | None, str | None, str | None]


def _evidence(b: Backtest) -> dict[tuple[Names, str], dict[str, Any]]:
    if not b.has(USAGE_DIR):
        return {}
    data = ds.dataset(b.path / USAGE_DIR, format="parquet")
    cols = ["entity_user", "entity_client_id", "entity_client_id_prefix", "key",
            *(c for c in EVIDENCE if c in data.schema.names)]  # fmt: skip
    rows = data.to_table(columns=[c for c in cols if c in data.schema.names]).to_pylist()
    return {((r["entity_user"], r["entity_client_id"], r.get("entity_client_id_prefix")), r["key"]): r for r in rows}


def source_store(b: Backtest) -> str | None:
    """The store the proposal was computed (and backtested) against, as ``recommend`` recorded it."""
    store = run_summary(b).get("advisor", {}).get("store")
    return store if isinstance(store, str) else None


def store_check(b: Backtest, console_store: str) -> dict[str, Any]:
    """Whether the proposal was computed from the console's store: ``same`` None when the output does not say."""
    source = source_store(b)
    return {"source": source, "console": console_store, "same": None if source is None else source == console_store}


def proposal(b: Backtest, backend: AdminBackend, console_store: str) -> dict[str, Any] | None:
    """Per entry of the proposal: the entity, each key's value in force when it was proposed (from the store the
    proposal was computed from, with the entity that supplied it), the value the console's store holds now for
    the entity, the proposed value and its evidence, and the entity's throttling before/after from the
    proposal's backtest; entries with the biggest change first."""
    if not has_proposal(b):
        return None
    outcomes = _outcomes(b)
    evidence = _evidence(b)
    stores = store_check(b, console_store)
    entries: list[dict[str, Any]] = []
    for i, a in enumerate(alterations(b)):
        now = current_values(backend, a.entity)
        names = (a.entity.get("user"), a.entity.get("client-id"), a.entity.get("client-id-prefix"))
        out = outcomes.get(names, {})
        values = []
        for op in a.ops:
            ev = evidence.get((names, op.key or ""), {})
            values.append({"key": op.key, "current": ev.get("current_limit") if ev else now.get(op.key or ""),
                           "source": ev.get("current_source"), "store_now": now.get(op.key or ""),
                           "proposed": op.value, "active_seconds": ev.get("active_seconds"),
                           "throttled_share": ev.get("throttled_share"), "lifts": bool(ev.get("lifts")),
                           "warning": ev.get("warning")})  # fmt: skip
        entries.append({
            "index": i, "entity": dict(a.entity), "values": values,
            "changed": sum(now.get(op.key or "") != op.value for op in a.ops),
            "outcome": {k: out.get(k) for k in ("requests", "throttle_s_before", "throttle_s_after",
                                                "throttled_seconds_before", "throttled_seconds_after",
                                                "delayed_bytes_before", "delayed_bytes_after", "throttle_s_delta")},
        })  # fmt: skip
    entries.sort(key=lambda e: (-abs(e["outcome"].get("throttle_s_delta") or 0.0), e["index"]))
    return {"entries": entries, "count": len(entries), "store": stores}


def apply_entries(b: Backtest, backend: AdminBackend, indexes: Sequence[int] | None, validate_only: bool,
                  console_store: str = "", confirm_store: str | None = None) -> list[dict[str, object]]:  # fmt: skip
    """Apply the chosen entries (all when ``indexes`` is None), each entity all-or-nothing, as
    ``client-quotas --alter --from-file``. A proposal computed from another store is written only when the
    request names the console's store in ``confirm_store``: its values were backtested against other quotas."""
    found = alterations(b)
    if indexes is None:
        chosen = found
    else:
        if not indexes or any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(found)
                              for i in indexes):  # fmt: skip
            raise InvalidRequestError(f"entries must be a non-empty list of indexes 0..{len(found) - 1}")
        chosen = [found[i] for i in sorted(set(indexes))]
    source = source_store(b)
    if not validate_only and source is not None and source != console_store and confirm_store != console_store:
        raise InvalidRequestError(
            f"this proposal was computed from store {source}, not this console's store {console_store}: its values "
            f"were backtested against that store's quotas. To write them here anyway, confirm the store "
            f"(confirm_store: {console_store!r})")
    return changes_to_json(apply(backend, chosen, validate_only))
