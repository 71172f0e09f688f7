"""``quotaflow shadow report``: enforced vs shadow equals ``quotaflow backtest --compare`` of a store with the
shadow's changes applied, over the same generated events; per tenant and per client IP equal to the two stores'
decisions aggregated independently (pandas); the shadow = replay check finds a tampered logged decision and is 0 on
consistent data (logged columns filled by the in-process replay under each store); clear one-line errors."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from quotaflow.cli.shadow_report import report
from quotaflow.events import read_dataset

PROPOSAL = [
    # tighter produce for the biggest tenant, its request quota removed (it falls to the default client-id's)
    {"entity": {"user": "tenant-0000"}, "values": {"producer_byte_rate": 400_000, "request_percentage": None}},
    {"entity": {"user": "tenant-0001"}, "values": {"consumer_byte_rate": 150_000}},  # a new quota
    {"entity": {"user": None}, "values": {"consumer_byte_rate": None}},  # the default user's fetch quota removed
    {"entity": {"ip": "10.0.1.1"}, "values": {"connection_creation_rate": None}},  # its IP quota removed
    {"entity": {"ip": "10.0.96.2"}, "values": {"connection_creation_rate": 400}},  # a storm IP (500/s) let in more
    {"entity": {"ip": "10.0.7.1"}, "values": {"connection_creation_rate": 1}},  # ~5 connections/s held to 1/s
]
ENTITY = ["broker", "quota_type", "tag_user", "tag_client_id"]


def cli() -> click.Group:
    """A test-only group holding the command as ``shadow`` will (the lead adds it to the real group)."""

    @click.group()
    def shadow() -> None: ...

    shadow.add_command(report)
    return shadow


def invoke(*args: str | Path) -> Any:
    return CliRunner().invoke(cli(), ["report", *(str(a) for a in args)])


@pytest.fixture(scope="module")
def proposal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("proposal") / "proposal.json"
    path.write_text(json.dumps(PROPOSAL))
    return path


@pytest.fixture(scope="module")
def proposal_db(quota_store: Path, proposal: Path) -> Path:
    """A copy of the store with the proposal applied as ``client-quotas --alter --from-file`` applies it."""
    from quotaflow.admin import Admin
    from quotaflow.admin.batch import alterations_from_json
    from quotaflow.store import open_store

    applied = proposal.parent / "proposal.db"
    shutil.copy(quota_store, applied)
    admin = Admin(open_store(applied))
    results = admin.alter(alterations_from_json(json.loads(proposal.read_text())))
    admin.close()
    assert results and all(r.ok for r in results)
    return applied


def test_with_changes_is_the_applied_store(quota_store: Path, proposal_db: Path) -> None:
    """The shadow config (enforced + changes, the advisor's code) is the config of the store the changes were
    applied to: sets, removals, new entities and IP quotas."""
    from quotaflow.pipeline.resolve import load_config
    from quotaflow.pipeline.shadow import proposal_shadow

    shadow = proposal_shadow(proposal_db.parent / "proposal.json", quota_store)
    base, applied = load_config(quota_store), load_config(proposal_db)
    made = base.with_changes(shadow.changes)
    assert made.ip_rates == applied.ip_rates != base.ip_rates
    for t, tc in applied.types.items():
        assert (made.types[t].overrides, made.types[t].mask) == (tc.overrides, tc.mask), t
    assert made.types["request"].mask != base.types["request"].mask or (
        made.types["request"].overrides != base.types["request"].overrides)


def _per_tenant(events: Path, decisions: Path) -> pd.DataFrame:
    """Per user, written out directly from one store's decisions joined to the events (the definition)."""
    t = read_dataset(events, "requests")
    assert t is not None
    ev = t.select(["broker", "seq", "user", "ts_ms", "api_key", "is_follower", "request_bytes",
                   "response_bytes"]).to_pandas()  # fmt: skip
    d = pq.read_table(decisions).select(["broker", "seq", "throttle_ms"]).to_pandas()
    df = ev.merge(d, on=["broker", "seq"], validate="one_to_one")
    hit = df[df["throttle_ms"] > 0]
    moved = hit["request_bytes"].where(hit["api_key"] == 0, 0) + hit["response_bytes"].where(
        (hit["api_key"] == 1) & ~hit["is_follower"], 0)  # fmt: skip
    out = pd.DataFrame({
        "requests": df.groupby("user").size(),
        "throttled_requests": hit.groupby("user").size(),
        "throttle_s": hit.groupby("user")["throttle_ms"].sum() / 1000.0,
        "throttled_seconds": hit.assign(s=hit["ts_ms"] // 1000).groupby("user")["s"].nunique(),
        "delayed_bytes": moved.groupby(hit["user"]).sum(),
    }).fillna(0)  # fmt: skip
    return out.astype({c: "int64" for c in out.columns if c != "throttle_s"})


def _per_ip(connections: Path) -> pd.DataFrame:
    c = pq.read_table(connections).to_pandas()
    return pd.DataFrame({"connections": c.groupby("client_ip").size(),
                         "delayed": (c["accept_delay_ms"] > 0).groupby(c["client_ip"]).sum(),
                         "refused": (c["result"] == "IP_THROTTLED").groupby(c["client_ip"]).sum()}).astype("int64")


@pytest.fixture(scope="module")
def offline(spark: Any, traffic: Path, quota_store: Path, proposal: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Path:  # fmt: skip
    """``shadow report --proposal`` over the generated traffic (no logged decisions: nothing to check)."""
    out = tmp_path_factory.mktemp("offline") / "report"
    r = invoke("--events", traffic, "--store", quota_store, "--proposal", proposal, "--out", out)
    assert r.exit_code == 0, r.output
    (out.parent / "printed.txt").write_text(r.output)
    return out


@pytest.mark.spark
def test_report_equals_backtest_compare(spark: Any, traffic: Path, quota_store: Path, proposal_db: Path,
                                        offline: Path, tmp_path: Path) -> None:  # fmt: skip
    from quotaflow.pipeline import backtest, job, replay

    bt = tmp_path / "bt"
    backtest.run(job.JobSpec(traffic, quota_store, bt, compare=proposal_db), spark=spark)
    for name in ("compare", "compare_summary"):
        keys = ENTITY if name == "compare" else []
        mine, theirs = pq.read_table(offline / name).to_pandas(), pq.read_table(bt / name).to_pandas()
        if keys:
            mine, theirs = (x.sort_values(keys).reset_index(drop=True) for x in (mine, theirs))
        pd.testing.assert_frame_equal(mine, theirs, check_exact=True, obj=name)
    cmp = pq.read_table(offline / "compare").to_pandas()
    assert (cmp["throttle_ms_delta"] != 0).any() and (cmp["throttle_ms_delta"] < 0).any()
    assert (cmp["throttle_ms_delta"] > 0).any()  # both tighter and looser quotas in the proposal

    rp = tmp_path / "rp"  # the proposal store's own decisions and admissions (replay == backtest, test_backtest)
    replay.run(job.JobSpec(traffic, proposal_db, rp))
    before, after = _per_tenant(traffic, bt / "decisions"), _per_tenant(traffic, rp / "decisions")
    tenants = pq.read_table(offline / "tenants").to_pandas().set_index("entity_user")
    assert tenants["entity_client_id"].isna().all()
    assert sorted(tenants.index) == sorted(before.index)
    for m in ("throttled_requests", "throttle_s", "throttled_seconds", "delayed_bytes"):
        for side, want in (("enforced", before), ("shadow", after)):
            got = tenants[f"{m}_{side}"].sort_index()
            pd.testing.assert_series_equal(got, want[m].sort_index(), check_names=False, check_exact=True,
                                           check_index_type=False, obj=f"{m}_{side}")  # fmt: skip
    assert (tenants["requests"].sort_index() == before["requests"].sort_index()).all()
    changed = tenants[tenants["throttle_s_delta"] != 0]
    assert len(changed) >= 2
    # sorted by who changes most: the absolute throttle-time change never grows down the table
    deltas = tenants["throttle_s_delta"].abs().tolist()
    assert deltas == sorted(deltas, reverse=True)

    ips = pq.read_table(offline / "ips").to_pandas().set_index("client_ip")
    for side, conns in (("enforced", bt / "connections"), ("shadow", rp / "connections")):
        want_ip = _per_ip(conns)
        for m in ("delayed", "refused"):
            assert ips[f"{m}_{side}"].sort_index().to_dict() == want_ip[m].sort_index().to_dict(), (m, side)
    assert ips.loc["10.0.96.2", "refused_enforced"] > ips.loc["10.0.96.2", "refused_shadow"]  # looser
    assert ips.loc["10.0.7.1", "refused_shadow"] > ips.loc["10.0.7.1", "refused_enforced"]  # tighter
    assert set(ips.index[:2]) == {"10.0.96.2", "10.0.7.1"}  # the IPs whose admissions change most first
    summary = json.loads((offline / "_SUMMARY.json").read_text())
    assert summary["requests"]["rows"].startswith("all rows")
    assert summary["requests"]["check"] == {"shadow": {"checked": 0, "mismatched": 0},
                                            "live": {"checked": 0, "mismatched": 0}}  # fmt: skip
    assert summary["totals"]["enforced"]["throttle_s"] == pytest.approx(before["throttle_s"].sum())
    printed = (offline.parent / "printed.txt").read_text()  # the table: changed tenants, most changed first
    top = tenants.index[0]
    assert f"{len(changed)} of {len(tenants)} tenants (user) would be throttled differently" in printed
    row = next(line for line in printed.splitlines() if f"user={top} " in line)
    a, b = tenants.loc[top, "throttled_requests_enforced"], tenants.loc[top, "throttled_requests_shadow"]
    assert f"{a:,} -> {b:,}" in row
    unchanged = tenants.index[tenants["throttled_requests_delta"].eq(0) & tenants["throttle_s_delta"].eq(0)
                              & tenants["delayed_bytes_delta"].eq(0) & tenants["throttled_seconds_delta"].eq(0)]
    assert f"user={unchanged[0]} " not in printed
    assert "all tenants" in printed and "10.0.7.1" in printed  # totals, and an IP whose admissions change


def logged_events(root: Path, traffic: Path, enforced: Path, shadow: Path, shadow_id: int) -> Path:
    """The traffic as a gateway running the shadow would have logged it: ``throttle_ms_*`` and the admissions from
    replaying it in process under the enforced store, ``shadow_throttle_ms_*`` and ``shadow_*`` admissions under
    the store with the shadow's changes applied, ``shadow_id`` on every row (two files per dataset)."""
    from quotaflow.engine.connection import ConnectionQuotaConfig
    from quotaflow.events import (
        CONNECTION_DECISION_FIELDS,
        REQUEST_DECISION_FIELDS,
        SHADOW_CONNECTION_FIELDS,
        SHADOW_ID,
        SHADOW_REQUEST_FIELDS,
    )
    from quotaflow.pipeline import replay
    from quotaflow.pipeline.connections import decide_all
    from quotaflow.pipeline.decide import WindowSettings
    from quotaflow.pipeline.resolve import load_config

    t = read_dataset(traffic, "requests")
    c = read_dataset(traffic, "connections")
    assert t is not None and c is not None
    live, _ = replay.decisions(t, load_config(enforced), WindowSettings(), windows=False)
    other, _ = replay.decisions(t, load_config(shadow), WindowSettings(), windows=False)
    assert live["seq"].equals(t["seq"]) and other["broker"].equals(t["broker"])  # row for row
    for f in REQUEST_DECISION_FIELDS:
        t = t.append_column(f, live[f.name])
    t = t.append_column(SHADOW_ID, pa.array([shadow_id] * t.num_rows, pa.int64()))
    for f, g in zip(SHADOW_REQUEST_FIELDS[1:], REQUEST_DECISION_FIELDS, strict=True):
        t = t.append_column(f, other[g.name])
    config = ConnectionQuotaConfig()
    live_c = decide_all(c, config, load_config(enforced).ip_rates)
    other_c = decide_all(c, config, load_config(shadow).ip_rates).select(
        ["broker", "seq", *(f.name for f in CONNECTION_DECISION_FIELDS)])  # fmt: skip
    other_c = other_c.rename_columns(["broker", "seq", *(f.name for f in SHADOW_CONNECTION_FIELDS[1:])])
    c = live_c.join(other_c, ["broker", "seq"]).sort_by([("broker", "ascending"), ("ts_ms", "ascending"),
                                                         ("seq", "ascending")])  # fmt: skip
    c = c.append_column(SHADOW_ID, pa.array([shadow_id] * c.num_rows, pa.int64()))
    for kind, table in (("requests", t), ("connections", c)):
        (root / kind).mkdir(parents=True)
        half = table.num_rows // 2
        pq.write_table(table.slice(0, half), root / kind / "part-0.parquet")
        pq.write_table(table.slice(half), root / kind / "part-1.parquet")
    return root


def rewrite(events: Path, out: Path, kind: str, change: Callable[[pa.Table], pa.Table]) -> None:
    """``out``: a copy of ``events`` (made once) with ``kind``'s rows changed by ``change`` (one file)."""
    if not out.exists():
        shutil.copytree(events, out)
    t = read_dataset(out, kind)
    assert t is not None
    for p in (out / kind).iterdir():
        p.unlink()
    pq.write_table(change(t), out / kind / "part-0.parquet")


def tamper(events: Path, out: Path, column: str, rows: int, broker: str = "broker-0") -> list[int]:
    """A copy of ``events`` with ``column`` raised by 1 ms on the first ``rows`` request rows of ``broker``
    that the column throttles; their seqs."""
    seqs: list[int] = []

    def change(t: pa.Table) -> pa.Table:
        on = pc.equal(t["broker"], broker)
        seqs.extend(t.filter(pc.and_(on, pc.greater(t[column], 0)))["seq"].to_pylist()[:rows])
        bump = pc.and_(on, pc.is_in(t["seq"], pa.array(seqs, pa.int64())))
        return t.set_column(t.schema.get_field_index(column), column, pc.if_else(bump, pc.add(t[column], 1), t[column]))

    rewrite(events, out, "requests", change)
    return seqs


@pytest.mark.spark
def test_proposal_checks_the_live_decisions_only(spark: Any, traffic: Path, quota_store: Path, proposal: Path,
                                                 proposal_db: Path, offline: Path, tmp_path: Path) -> None:  # fmt: skip
    """--proposal over logged events: every row read, the logged live decisions checked against the enforced
    replay (a tampered one found), the logged shadow ones not (they are the gateway's shadow, not this file)."""
    events = logged_events(tmp_path / "ev", traffic, quota_store, proposal_db, 7)
    seqs = tamper(events, tmp_path / "bad", "throttle_ms_fetch", 2)
    out = tmp_path / "out"
    r = invoke("--events", tmp_path / "bad", "--store", quota_store, "--proposal", proposal, "--out", out, "--strict")
    assert r.exit_code == 3, r.output
    assert "live = replay (requests): 2 of 12000 logged rows differ" in r.output
    assert "warning: 2 logged live decisions (requests) differ from the replay; see mismatches/" in r.output
    assert "shadow = replay (requests): not checked, --proposal is no shadow a gateway logged" in r.output
    assert "live = replay (connections): 0 of 5172 logged rows differ" in r.output
    bad = pq.read_table(out / "mismatches").to_pandas()
    assert sorted(bad["seq"]) == sorted(seqs) and set(bad["check"]) == {"live"}
    assert (bad["logged_throttle_ms_fetch"] == bad["replayed_throttle_ms_fetch"] + 1).all()
    for name in ("tenants", "compare", "ips"):  # the logged columns change nothing the report computes
        pd.testing.assert_frame_equal(pq.read_table(out / name).to_pandas(), pq.read_table(offline / name).to_pandas(),
                                      check_exact=True, obj=name)  # fmt: skip


@pytest.fixture(scope="module")
def shadow_store(quota_store: Path, proposal: Path) -> tuple[Path, int, int]:
    """A copy of the enforced store whose shadow history holds "first-try" (the first entity's changes only,
    replaced) and "storm-relief" (the whole proposal, running), started from the proposal as `shadow start`
    validates it (the admin's alter plan); (path, first-try's id, storm-relief's id)."""
    from quotaflow.admin import Admin
    from quotaflow.admin.batch import alterations_from_json
    from quotaflow.store import open_store

    path = proposal.parent / "shadow.db"
    shutil.copy(quota_store, path)
    admin = Admin(open_store(path))
    results, changes = admin.plan(alterations_from_json(PROPOSAL))
    assert all(r.ok for r in results)
    store: Any = admin.store
    first = store.start_shadow("first-try", "bob", changes[:1])
    running = store.start_shadow("storm-relief", "alice", changes)
    admin.close()
    return path, first.id, running.id


@pytest.fixture(scope="module")
def logged(traffic: Path, quota_store: Path, proposal_db: Path, shadow_store: tuple[Path, int, int],
           tmp_path_factory: pytest.TempPathFactory) -> Path:  # fmt: skip
    return logged_events(tmp_path_factory.mktemp("logged"), traffic, quota_store, proposal_db, shadow_store[2])


@pytest.mark.spark
def test_shadow_equals_replay_and_agrees_with_its_proposal(spark: Any, logged: Path,
                                                          shadow_store: tuple[Path, int, int], offline: Path,
                                                          tmp_path: Path) -> None:  # fmt: skip
    """The store's running shadow over the events a gateway logged under it: every logged shadow and live
    decision reproduced (0 differ, --strict passes), and the report is the --proposal report of its changes."""
    store, _, sid = shadow_store
    out = tmp_path / "out"
    r = invoke("--events", logged, "--store", store, "--shadow", "storm-relief", "--out", out, "--strict")
    assert r.exit_code == 0, r.output
    for line in ("shadow = replay (requests): 0 of 12000 logged rows differ",
                 "live = replay (requests): 0 of 12000 logged rows differ",
                 "shadow = replay (connections): 0 of 5172 logged rows differ",
                 "live = replay (connections): 0 of 5172 logged rows differ"):  # fmt: skip
        assert line in r.output, r.output
    assert "warning" not in r.output
    assert f"shadow 'storm-relief' (id {sid}, running)" in r.output
    for name in ("tenants", "compare", "compare_summary", "ips"):
        pd.testing.assert_frame_equal(pq.read_table(out / name).to_pandas(), pq.read_table(offline / name).to_pandas(),
                                      check_exact=True, obj=name)  # fmt: skip
    summary = json.loads((out / "_SUMMARY.json").read_text())
    assert summary["shadow"]["id"] == sid and summary["shadow"]["started_by"] == "alice"
    assert summary["requests"]["rows"] == f"rows logged with shadow_id {sid}"
    decisions = pq.read_table(out / "decisions").to_pandas().sort_values(["broker", "seq"]).reset_index(drop=True)
    events = read_dataset(logged, "requests")
    assert events is not None
    want = events.to_pandas().sort_values(["broker", "seq"]).reset_index(drop=True)
    for col in ("throttle_ms", "shadow_throttle_ms", "shadow_throttle_ms_fetch"):  # the gateway's names, row for row
        assert decisions[col].tolist() == want[col].tolist()
    assert (want["shadow_throttle_ms"] != want["throttle_ms"]).any()  # the two sets do decide differently


@pytest.mark.spark
def test_mismatch_counter_finds_tampered_shadow_rows_of_its_shadow_only(spark: Any, logged: Path,
                                                                        shadow_store: tuple[Path, int, int],
                                                                        tmp_path: Path) -> None:  # fmt: skip
    """Three logged shadow decisions off by 1 ms are found (and listed); broker-2's rows, logged under another
    shadow set (one of them tampered too: not counted) or before any shadow ran (in a file of their own without the
    shadow columns, as the gateway writes them, listed first), are not read."""
    store, first, sid = shadow_store
    bad = tmp_path / "bad"
    seqs = tamper(logged, bad, "shadow_throttle_ms", 3)
    tamper(bad, tmp_path / "bad2", "shadow_throttle_ms", 1, broker="broker-2")

    def other_shadow(t: pa.Table) -> pa.Table:
        ids = pc.if_else(pc.equal(t["broker"], "broker-2"), pa.scalar(first, pa.int64()), t["shadow_id"])
        return t.set_column(t.schema.get_field_index("shadow_id"), "shadow_id", ids)

    for kind in ("requests", "connections"):
        rewrite(tmp_path / "bad2", tmp_path / "bad2", kind, other_shadow)
        mixed = pq.read_table(tmp_path / "bad2" / kind / "part-0.parquet")
        before = pc.and_(pc.equal(mixed["broker"], "broker-2"), pc.equal(pc.bit_wise_and(mixed["seq"], 1), 1))
        no_shadow = [n for n in mixed.column_names if not n.startswith("shadow_")]
        pq.write_table(mixed.filter(before).select(no_shadow), tmp_path / "bad2" / kind / "a-before.parquet")
        pq.write_table(mixed.filter(pc.invert(before)), tmp_path / "bad2" / kind / "part-0.parquet")
    t = read_dataset(tmp_path / "bad2", "requests")
    c = read_dataset(tmp_path / "bad2", "connections")
    assert t is not None and c is not None
    kept = pc.sum(pc.not_equal(t["broker"], "broker-2")).as_py()
    kept_c = pc.sum(pc.not_equal(c["broker"], "broker-2")).as_py()
    assert 0 < kept < t.num_rows and 0 < kept_c < c.num_rows
    out = tmp_path / "out"
    r = invoke("--events", tmp_path / "bad2", "--store", store, "--shadow", str(sid), "--out", out)
    assert r.exit_code == 0, r.output  # without --strict a warning, not a failure
    assert f"shadow = replay (requests): 3 of {kept} logged rows differ" in r.output
    assert "warning: 3 logged shadow decisions (requests) differ from the replay; see mismatches/" in r.output
    assert f"live = replay (requests): 0 of {kept} logged rows differ" in r.output
    assert f"shadow = replay (connections): 0 of {kept_c} logged rows differ" in r.output
    mismatches = pq.read_table(out / "mismatches").to_pandas()
    assert sorted(mismatches["seq"]) == sorted(seqs) and set(mismatches["broker"]) == {"broker-0"}
    assert (mismatches["logged_throttle_ms"] == mismatches["replayed_throttle_ms"] + 1).all()
    summary = json.loads((out / "_SUMMARY.json").read_text())
    assert summary["counts"]["selected_requests"] == kept and summary["counts"]["selected_connections"] == kept_c
    assert summary["requests"]["check"]["shadow"] == {"checked": kept, "mismatched": 3}
    strict = invoke("--events", tmp_path / "bad2", "--store", store, "--shadow", str(sid), "--out", out, "--strict")
    assert strict.exit_code == 3


def test_which_shadow(shadow_store: tuple[Path, int, int], quota_store: Path) -> None:
    from quotaflow.core.errors import CommandError
    from quotaflow.pipeline.shadow import store_shadow

    store, first, sid = shadow_store
    running = store_shadow(store, None)
    assert running.record is not None and running.record.id == sid and len(running.changes) == len(PROPOSAL)
    by_id = store_shadow(store, str(first))
    assert by_id.record is not None and by_id.record.name == "first-try" and by_id.record.outcome == "replaced"
    assert by_id.changes == running.changes[:1]
    assert store_shadow(store, "storm-relief").record == running.record
    with pytest.raises(CommandError, match="no shadow set in store"):
        store_shadow(quota_store, None)  # a store no shadow ever ran on


def _one_line_error(r: Any, text: str) -> None:
    assert r.exit_code == 1 and r.exception is not None, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and text in lines[0], r.output


def test_bad_input_one_line_errors(shadow_store: tuple[Path, int, int], traffic: Path, proposal: Path,
                                   tmp_path: Path) -> None:  # fmt: skip
    store = shadow_store[0]
    common = ("--store", store, "--out", tmp_path / "out")
    _one_line_error(invoke("--events", traffic, *common, "--shadow", "nope"),
                    "no shadow set 'nope' in store")  # fmt: skip
    _one_line_error(invoke("--events", tmp_path / "none", *common), "does not exist")
    (tmp_path / "empty" / "requests").mkdir(parents=True)
    _one_line_error(invoke("--events", tmp_path / "empty", *common), "no event files under")
    _one_line_error(invoke("--events", traffic, *common, "--shadow", "storm-relief", "--proposal", proposal),
                    "--shadow and --proposal")  # fmt: skip
    negative = tmp_path / "negative.json"
    negative.write_text(json.dumps([{"entity": {"user": "u"}, "values": {"producer_byte_rate": -5}}]))
    _one_line_error(invoke("--events", traffic, *common, "--proposal", negative),
                    "1 of 1 entities are invalid: ClientQuotaEntity(entries={user=u}): Quota producer_byte_rate "
                    "must be greater than 0")  # fmt: skip
    _one_line_error(invoke("--events", traffic, *common, "--proposal", tmp_path / "missing.json"), "Cannot read")
    assert not (tmp_path / "out").exists()  # every refusal before Spark and before OUT is touched


def _same_config(a: Any, b: Any) -> bool:
    return a.ip_rates == b.ip_rates and all(
        (a.types[t].overrides, a.types[t].mask) == (b.types[t].overrides, b.types[t].mask) for t in b.types)


def test_promoted_shadow_is_compared_with_the_quotas_before_its_promotion(shadow_store: tuple[Path, int, int],
                                                                          quota_store: Path, proposal_db: Path,
                                                                          tmp_path: Path) -> None:  # fmt: skip
    """Once promoted, the enforced quotas hold the shadow's changes: its report compares the shadow with the quotas
    it ran beside (restored from the promotion's previous values), after a rollback too, not with itself."""
    from quotaflow.pipeline.resolve import load_config
    from quotaflow.pipeline.shadow import store_shadow
    from quotaflow.store import open_store

    path = tmp_path / "promoted.db"
    shutil.copy(shadow_store[0], path)
    before, applied = load_config(quota_store), load_config(proposal_db)
    st: Any = open_store(path)
    st.promote_shadow("carol", 0)
    st.close()
    assert _same_config(load_config(path), applied)  # the enforced quotas now are the shadow's
    for step in ("promoted", "rolled back"):
        shadow = store_shadow(path, "storm-relief")
        assert shadow.record is not None and shadow.record.outcome == "promoted"
        base, other = shadow.configs(load_config(path))
        assert _same_config(base, before) and _same_config(other, applied), step
        assert "before promotion" in shadow.describe()["base"]  # type: ignore[operator]
        if step == "promoted":
            st = open_store(path)
            st.rollback("carol", 0)
            st.close()
            assert _same_config(load_config(path), before)
