"""``quotaflow recommend``: the recommended values against an independent numpy computation of the definition
(every entity type, every key), and the proposal's backtest against replay of a store the proposal was applied to."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from quotaflow.engine.exempt import EXEMPT_THROTTLE_API_KEYS
from quotaflow.events import read_dataset

KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
KEY_TYPE = {"producer_byte_rate": "produce", "consumer_byte_rate": "fetch", "request_percentage": "request"}
Buckets = dict[str, dict[tuple[str, str], str]]  # quota type -> (user, client_id) -> the prefix whose bucket holds it


def round_up_3(v: float) -> float:
    """Up to 3 significant figures of the float's shortest form, written independently of the advisor's (exact
    fractions and a ceiling)."""
    import math
    from fractions import Fraction

    exact = Fraction(repr(v))
    step = Fraction(10) ** (math.floor(math.log10(v)) - 2)
    if exact >= step * 1000:  # log10 rounded down across a power of ten
        step *= 10
    return float(math.ceil(exact / step) * step)


def expected(events: Path, level: str, percentile: float, headroom: float, min_rate: float,
             buckets: Buckets | None = None, window: int = 11,
             min_active: int = 1) -> dict[Any, dict[str, float]]:  # fmt: skip
    """The definition, written out directly: per entity, zero-filled (broker, second) usage, its rate over every
    quota window (``window`` seconds, or the whole trace if shorter) ending at a second of the trace,
    np.percentile, × headroom rounded up to 3 significant figures; no value for a key seen in fewer than
    ``min_active`` epoch seconds. ``client-id-prefix``: the entity of a row, per key, is the prefix whose bucket
    holds its client (``buckets``); a bucket's cells are the union of its clients' usage."""
    t = read_dataset(events, "requests")
    assert t is not None
    api = t["api_key"].to_numpy()
    follower = t["is_follower"].to_numpy(zero_copy_only=False)
    acks = pc.fill_null(t["acks"], 1).to_numpy()
    exempt = np.isin(api, list(EXEMPT_THROTTLE_API_KEYS)) | follower | ((api == 0) & (acks == 0))
    values = {
        "producer_byte_rate": np.where(api == 0, t["request_bytes"].to_numpy(), 0),
        "consumer_byte_rate": np.where((api == 1) & ~follower, t["response_bytes"].to_numpy(), 0),
        "request_percentage": np.where(~exempt, t["io_thread_ns"].to_numpy() + t["network_thread_ns"].to_numpy(), 0),
    }
    recorded = {"producer_byte_rate": api == 0, "consumer_byte_rate": (api == 1) & ~follower,
                "request_percentage": ~exempt}  # fmt: skip
    ts = t["ts_ms"].to_numpy()
    first, last = ts.min() // 1000, ts.max() // 1000
    seconds = last - first + 1
    users, cids = t["user"].to_pylist(), t["client_id"].to_pylist()
    brokers = np.array(t["broker"].to_pylist(), dtype=object)
    names_of: dict[str, list[tuple[str, ...]]] = {}
    for key in KEYS:
        if level == "user":
            names_of[key] = [(u,) for u in users]
        elif level == "client-id":
            names_of[key] = [(c,) for c in cids]
        elif level == "user,client-id":
            names_of[key] = list(zip(users, cids, strict=True))
        else:
            assert buckets is not None
            held = buckets[KEY_TYPE[key]]
            names_of[key] = [(held.get((u, c), ""),) for u, c in zip(users, cids, strict=True)]
    every = sorted({n for names in names_of.values() for n in names})
    ids = {n: i for i, n in enumerate(every)}
    name_ids = {key: np.array([ids[n] for n in names]) for key, names in names_of.items()}
    out: dict[Any, dict[str, float]] = {}
    for name in every:
        if not all(name):
            continue  # Kafka refuses empty names (and "": no prefix bucket holds the client)
        vals: dict[str, float] = {}
        for key in KEYS:
            rows = (name_ids[key] == ids[name]) & recorded[key]
            used = sorted(set(brokers[rows]))  # the brokers where this key's manager recorded the entity
            if not used or len(set((ts[rows] // 1000).tolist())) < min_active:
                continue  # never used the key (or too seldom): no value
            cells = np.zeros((len(used), seconds), dtype=np.int64)
            for i, b in enumerate(used):
                sel = rows & (brokers == b)
                np.add.at(cells[i], ts[sel] // 1000 - first, values[key][sel])
            w = min(window, seconds)
            sums = np.array([[row[end - w + 1:end + 1].sum() for end in range(w - 1, seconds)] for row in cells])
            usage = sums.ravel().astype(np.float64)
            if key == "request_percentage":
                usage = usage * (100.0 / 1e9)  # KIP-124: nanoseconds of one thread per second, in percent
            v = max(round_up_3(float(np.percentile(usage / w, percentile)) * headroom), min_rate)
            vals[key] = float(np.ceil(v)) if key != "request_percentage" else v
        if vals:
            out[name] = vals
    return out


def proposal_by_name(out: Path, level: str) -> dict[Any, dict[str, float]]:
    doc = json.loads((out / "proposal.json").read_text())
    found = {}
    for entry in doc:
        e = entry["entity"]
        name = (e["user"],) if level == "user" else (e["client-id"],) if level == "client-id" else (
            (e["client-id-prefix"],) if level == "client-id-prefix" else (e["user"], e["client-id"]))
        found[name] = entry["values"]
    return found


@pytest.mark.spark
@pytest.mark.parametrize(("level", "percentile", "headroom"),
                         [("user", 99.0, 1.2), ("client-id", 95.0, 1.5), ("user,client-id", 99.9, 1.0)])
def test_recommended_values_equal_numpy_of_the_definition(spark: Any, traffic: Path, quota_store: Path,
                                                          tmp_path: Path, level: str, percentile: float,
                                                          headroom: float) -> None:
    from quotaflow.pipeline.advisor import AdvisorSettings
    from quotaflow.pipeline.recommend import RecommendSpec, run

    out = tmp_path / "rec"
    run(RecommendSpec(traffic, quota_store, out, level, AdvisorSettings(percentile, headroom, 1.0)), spark=spark)
    want = expected(traffic, level, percentile, headroom, 1.0, min_active=5)  # the defaults: 11 s window, 5 s
    got = proposal_by_name(out, level)
    assert len(want) > 10
    assert any(len(v) < 3 for v in want.values())  # some entities do not use every key, and get no value for it
    assert got == want  # exact: the same float arithmetic as np.percentile
    # heavy tails: the biggest tenant's value is far above the median tenant's
    produce = sorted(v["producer_byte_rate"] for v in got.values() if "producer_byte_rate" in v)
    assert produce[-1] > 10 * produce[len(produce) // 2]


def _sorted(table: pa.Table, keys: list[str]) -> pa.Table:
    return table.sort_by([(k, "ascending") for k in keys])


def _apply(store: Path, out: Path, tmp_path: Path) -> Path:
    """A copy of ``store`` with ``out``'s proposal applied as `client-quotas --alter --from-file` applies it."""
    from quotaflow.admin import Admin
    from quotaflow.admin.batch import alterations_from_json
    from quotaflow.store import open_store

    applied = tmp_path / "applied.db"
    shutil.copy(store, applied)
    admin = Admin(open_store(applied))
    results = admin.alter(alterations_from_json(json.loads((out / "proposal.json").read_text())))
    admin.close()
    assert results and all(r.ok for r in results)
    return applied


def _buckets(store: Path, events: Path, excluded: frozenset[str] = frozenset()) -> Buckets:
    """Which prefix bucket holds each client of the trace, per quota type, under ``store``'s quotas: the
    backtest's and replay's resolution (the quota model's precedence), not a second one."""
    from quotaflow.core.precedence import PREFIX_TAG_USER
    from quotaflow.pipeline.resolve import QUOTA_TYPES, load_config, resolve_clients

    t = read_dataset(events, "requests")
    assert t is not None
    pairs = set(zip(t["user"].to_pylist(), t["client_id"].to_pylist(), strict=True))
    res = resolve_clients(load_config(store, excluded), pairs).to_pylist()
    return {q: {(r["user"], r["client_id"]): r[f"{q}_tag_client_id"] for r in res
                if r[f"{q}_tag_user"] == PREFIX_TAG_USER and r["user"] not in excluded}
            for q in QUOTA_TYPES}  # fmt: skip


PREFIXES = ("ANONYMOUS-", "nobody-", "tenant-0002-")
"""``--prefixes`` beside the prefix store's three: the generated clients are ``<user>-app-<n>``. Nobody's id starts
with ``nobody-``; tenant-0002's clients match ``tenant-0002-`` but its user quota holds them for every key."""


@pytest.fixture(scope="module")
def prefix_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three client-id-prefix entities (a longer inside a shorter, one holding none of the advisor's keys), an
    exact client-id that takes one client out of a bucket for two types, a user quota that takes a tenant out of
    every bucket, the default client-id below."""
    from quotaflow.core.entities import DEFAULT, QuotaEntity
    from quotaflow.store import open_store

    path = tmp_path_factory.mktemp("prefix") / "quotas.db"
    st = open_store(path)
    st.alter([
        (QuotaEntity(client_id_prefix="tenant-000"), {"request_percentage": 0.5}),
        (QuotaEntity(client_id_prefix="tenant-0001-"), {"producer_byte_rate": 5_000.0}),
        (QuotaEntity(client_id_prefix="tenant-001"), {"controller_mutation_rate": 10.0}),  # no key the advisor sets
        (QuotaEntity(client_id="tenant-0004-app-1"), {"producer_byte_rate": 1e6, "request_percentage": 5.0}),
        (QuotaEntity(user="tenant-0002"), {k: 1e6 for k in KEYS}),
        (QuotaEntity(client_id=DEFAULT), {"request_percentage": 0.2}),
    ])  # fmt: skip
    st.close()
    return path


@pytest.mark.spark
def test_prefix_values_equal_numpy_of_the_definition(spark: Any, traffic: Path, prefix_store: Path,
                                                     tmp_path: Path) -> None:  # fmt: skip
    from quotaflow.pipeline.advisor import AdvisorSettings
    from quotaflow.pipeline.recommend import RecommendSpec, run

    out = tmp_path / "rec"
    run(RecommendSpec(traffic, prefix_store, out, "client-id-prefix", AdvisorSettings(95.0, 1.5, 1.0),
                      prefixes=PREFIXES), spark=spark)  # fmt: skip
    buckets = _buckets(_apply(prefix_store, out, tmp_path), traffic)
    # the model's precedence, as the buckets show it: the longest prefix wins; an exact client-id entity takes
    # its client out for the types it holds, not the others; a user quota takes the tenant out of every bucket
    assert buckets["produce"][("tenant-0001", "tenant-0001-app-0")] == "tenant-0001-"
    assert buckets["request"][("tenant-0001", "tenant-0001-app-0")] == "tenant-0001-"
    assert ("tenant-0004", "tenant-0004-app-1") not in buckets["produce"]
    assert ("tenant-0004", "tenant-0004-app-1") not in buckets["request"]
    assert buckets["fetch"][("tenant-0004", "tenant-0004-app-1")] == "tenant-000"
    assert not any(u == "tenant-0002" for q in buckets.values() for u, _ in q)
    want = expected(traffic, "client-id-prefix", 95.0, 1.5, 1.0, buckets, min_active=5)
    got = proposal_by_name(out, "client-id-prefix")
    # nobody-: no client; tenant-0002-: its clients used every key, but the user quota holds them (dropped once
    # resolved: a placeholder left for it would make the proposal config differ from the applied store)
    # ANONYMOUS-: its clients were seen in fewer seconds than --min-active-seconds (5): thin evidence, no value
    assert set(want) == {("tenant-000",), ("tenant-0001-",), ("tenant-001",)}
    summary = json.loads((out / "_SUMMARY.json").read_text())
    assert sorted(summary["advisor"]["prefixes"]) == sorted(n for (n,) in want)
    assert all(set(v) == set(KEYS) for v in want.values())
    assert got == want  # exact: the same float arithmetic as np.percentile
    usage = pq.read_table(out / "usage")
    assert set(usage["entity_client_id_prefix"].to_pylist()) == {n for (n,) in want}
    row = usage.filter(pc.and_(pc.equal(usage["entity_client_id_prefix"], "tenant-000"),
                               pc.equal(usage["key"], "request_percentage"))).to_pylist()  # fmt: skip
    assert row[0]["current_value"] == 0.5
    from click.testing import CliRunner

    from quotaflow.cli.main import cli

    report = CliRunner().invoke(cli, ["report", "--in", str(out), "--out", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    assert "client-id-prefix=tenant-001" in (tmp_path / "report" / "report.html").read_text()


def test_prefixes_only_at_the_prefix_level(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from quotaflow.cli.main import cli

    base = ["recommend", "--events", str(tmp_path), "--store", str(tmp_path / "q.db"), "--out", str(tmp_path / "o")]
    bad = CliRunner().invoke(cli, [*base, "--entity-type", "user", "--prefixes", "etl-"])
    assert bad.exit_code != 0 and "--prefixes is for --entity-type client-id-prefix, not user" in bad.output
    # at its own level the option is taken (what fails next is the missing events, before Spark starts)
    other = CliRunner().invoke(cli, [*base, "--entity-type", "client-id-prefix", "--prefixes", "etl-,batch-"])
    assert other.exit_code != 0 and "--prefixes" not in other.output, other.output


@pytest.mark.spark
@pytest.mark.parametrize("level", ["user", "client-id", "client-id-prefix"])
def test_proposal_applied_and_replayed_throttles_as_its_backtest_predicted(spark: Any, traffic: Path,
                                                                          quota_store: Path, prefix_store: Path,
                                                                          tmp_path: Path, level: str) -> None:
    from quotaflow.pipeline import job, replay
    from quotaflow.pipeline.advisor import AdvisorSettings
    from quotaflow.pipeline.recommend import PROPOSED_PREFIX, PROPOSED_WINDOWS, RecommendSpec, run

    out = tmp_path / "rec"
    props = tmp_path / "broker.properties"  # one heavy tenant excluded from client quotas, as the gateway can
    props.write_text("quota.window.num=5\nquotaflow.quota.excluded.principals=User:tenant-0001\n")
    at_prefix = level == "client-id-prefix"
    if at_prefix:  # the store's own client-id-prefix entities, and more from --prefixes
        quota_store = prefix_store
    run(RecommendSpec(traffic, quota_store, out, level, AdvisorSettings(90.0, 1.0, 1.0), props,
                      PREFIXES if at_prefix else ()), spark=spark)  # fmt: skip
    names = [v for e in json.loads((out / "proposal.json").read_text()) for v in e["entity"].values()]
    # excluded: recorded by no manager (a prefix bucket of only its clients, tenant-0001-, gets no value)
    assert names and not any(n.startswith("tenant-0001") for n in names)
    applied = _apply(quota_store, out, tmp_path)

    decided = _sorted(pq.read_table(out / "decisions"), ["broker", "seq"])
    cols = ["throttle_ms_produce", "throttle_ms_fetch", "throttle_ms_request", "throttle_ms"]
    window_keys = ["broker", "quota_type", "tag_user", "tag_client_id", "window_start_ms"]
    for store, prefix, windows in ((applied, PROPOSED_PREFIX, PROPOSED_WINDOWS), (quota_store, "", "windows")):
        rp = tmp_path / f"replay-{prefix or 'store'}"
        replay.run(job.JobSpec(traffic, store, rp, broker_config=props))
        want = _sorted(pq.read_table(rp / "decisions"), ["broker", "seq"])
        assert decided.num_rows == want.num_rows
        for c in cols:
            assert decided[prefix + c].equals(want[c]), (prefix, c)
        assert _sorted(pq.read_table(out / windows), window_keys).equals(
            _sorted(pq.read_table(rp / "windows"), window_keys))
    # the proposal (p90, no headroom) throttles: the comparison is not between two empty sets (a few prefix
    # buckets throttle fewer requests than a hundred per-tenant quotas, but some, in the buckets themselves)
    assert pc.sum(pc.greater(decided[PROPOSED_PREFIX + "throttle_ms"], 0)).as_py() > (20 if at_prefix else 100)
    outcome = pq.read_table(out / "outcome")
    assert pc.sum(outcome["throttled_requests_after"]).as_py() > 0
    owned = None
    if at_prefix:  # a client counts under the prefix whose bucket holds it (for any type)
        buckets = _buckets(applied, traffic, frozenset({"tenant-0001"}))
        owned = {pair for q in buckets.values() for pair in q}
        assert {p for q in buckets.values() for p in q.values()} == set(names)
    assert pc.sum(outcome["throttled_requests_after"]).as_py() == pc.sum(
        pc.greater(decided[PROPOSED_PREFIX + "throttle_ms"], 0)).as_py() - _unowned_throttled(traffic, decided, level,
                                                                                              owned)  # fmt: skip


def _unowned_throttled(events: Path, decided: pa.Table, level: str,
                       owned: set[tuple[str, str]] | None = None) -> int:  # fmt: skip
    """Throttled requests (after) of clients without an entity of their own (an empty name; at the prefix level,
    a client no bucket holds)."""
    t = read_dataset(events, "requests")
    assert t is not None
    t = _sorted(t.select(["broker", "seq", "user", "client_id"]), ["broker", "seq"])
    hit = pc.greater(decided["proposed_throttle_ms"], 0).to_numpy(zero_copy_only=False)
    if owned is not None:
        pairs = zip(t["user"].to_pylist(), t["client_id"].to_pylist(), strict=True)
        return int(sum(h and p not in owned for h, p in zip(hit.tolist(), pairs, strict=True)))
    name = t["user"] if level == "user" else t["client_id"]
    return int(np.sum(hit & pc.equal(name, "").to_numpy(zero_copy_only=False)))


@pytest.mark.spark
def test_recommend_cli_then_report(spark: Any, traffic: Path, quota_store: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from quotaflow.cli.main import cli

    out = tmp_path / "rec"
    result = CliRunner().invoke(cli, ["recommend", "--events", str(traffic), "--store", str(quota_store), "--out",
                                      str(out), "--entity-type", "user,client-id", "--keys", "producer_byte_rate",
                                      "--percentile", "50", "--min-rate", "1000"])  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "proposal.json").read_text())
    assert doc and all(set(e["values"]) == {"producer_byte_rate"} for e in doc)
    assert all(v["producer_byte_rate"] >= 1000 for v in (e["values"] for e in doc))
    assert all(set(e["entity"]) == {"user", "client-id"} for e in doc)
    usage = pq.read_table(out / "usage")
    assert set(usage.column_names) >= {"entity_user", "entity_client_id", "p99", "peak", "seconds", "quantiles",
                                       "current_limit", "recommended"}  # fmt: skip
    # tenant-0003's app-0 holds a (user, client-id) quota of 1e5 in the store: the current limit is that
    row = usage.filter(pc.equal(usage["entity_client_id"], "tenant-0003-app-0")).to_pylist()
    assert row and row[0]["current_limit"] == 1e5 and row[0]["current_value"] == 1e5
    report = CliRunner().invoke(cli, ["report", "--in", str(out), "--out", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    page = (tmp_path / "report" / "report.html").read_text()
    assert "quotaflow recommend report" in page and "usage distribution per entity" in page
    assert "throttle time s before" in page
    assert (tmp_path / "report" / "usage_distribution.png").stat().st_size > 10_000
    bad = CliRunner().invoke(cli, ["recommend", "--events", str(traffic), "--store", str(quota_store), "--out",
                                   str(out), "--keys", "controller_mutation_rate"])  # fmt: skip
    assert bad.exit_code != 0 and "--keys takes producer_byte_rate" in bad.output
