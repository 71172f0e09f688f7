"""Issue 35, the advisor's proposal a person can trust: a client throttled on purpose is not lifted by its
start-up bursts (and a lift is marked), one second of traffic proposes nothing, values are round, the quota in
force is shown resolved with its source, the proposal is printed with its evidence, and the work reports its
progress when no terminal is attached."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quotaflow.events import REQUEST_SCHEMA

T0 = 1_700_000_000_000
THROTTLED_QUOTA = 500_000.0
BURST = 1_500_000  # what the throttled client sends in one second, then waits out its throttle
STEADY = 123_457  # bytes/s, every second: 1.2 x = 148,148.4 -> 149,000 (3 significant figures, up)
STEADY_NS = 16_397_002  # request thread time per second: 1.6397002 %, x 1.2 = 1.96764024 -> 1.97


def _row(second: int, client: str, api_key: int, request_bytes: int, ns: int, seq: int) -> dict[str, Any]:
    return {"ts_ms": T0 + second * 1000 + 7, "broker": "b0", "listener": "PLAINTEXT", "user": "ANONYMOUS",
            "client_id": client, "client_ip": "10.0.0.1", "api_key": api_key, "api_version": 9,
            "request_bytes": request_bytes, "response_bytes": 50, "io_thread_ns": ns, "network_thread_ns": 0,
            "acks": 1 if api_key == 0 else None, "is_follower": False, "seq": seq}  # fmt: skip


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """18 s on one broker, quota window 3 x 1 s (the demo's). ``held``: throttled on purpose at 500,000 B/s, it
    sends 1.5 MB in one second, then is silent for two (its window's worth): per-second cells see 1.5 MB/s, the
    window sees 500,000. ``once``: one metadata request, under a request quota of 50 from ``<default>``.
    ``steady``: the same load every second."""
    from quotaflow.core.entities import DEFAULT, QuotaEntity
    from quotaflow.store import open_store

    root = tmp_path_factory.mktemp("trust")
    rows = []
    for s in range(18):
        if s % 3 == 0:
            rows.append(_row(s, "held", 0, BURST, 1_000_000, len(rows)))
        rows.append(_row(s, "steady", 0, STEADY, STEADY_NS, len(rows)))
    rows.append(_row(5, "once", 3, 40, 2_000_000, len(rows)))
    (root / "events" / "requests").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=REQUEST_SCHEMA), root / "events" / "requests" / "p.parquet")
    store = root / "quotas.db"
    st = open_store(store)
    st.alter([(QuotaEntity(user="ANONYMOUS", client_id="held"), {"producer_byte_rate": THROTTLED_QUOTA}),
              (QuotaEntity(user="ANONYMOUS", client_id=DEFAULT), {"request_percentage": 50.0})])  # fmt: skip
    st.close()
    props = root / "broker.properties"
    props.write_text("quota.window.num=3\nquota.window.size.seconds=1\n")
    return root / "events", store, props


@pytest.fixture(scope="module")
def ran(spark: Any, case: tuple[Path, Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    from click.testing import CliRunner

    from quotaflow.cli import progress
    from quotaflow.cli.main import cli

    events, store, props = case
    out = tmp_path_factory.mktemp("rec") / "out"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(progress, "QUIET_S", 0.0)  # every stage's line, however fast this host runs it
        result = CliRunner().invoke(cli, ["recommend", "--events", str(events), "--store", str(store), "--out",
                                          str(out), "--entity-type", "user,client-id", "--broker-config", str(props)])
    assert result.exit_code == 0, result.output
    return result, out


def _proposal(out: Path) -> dict[str, dict[str, float]]:
    return {e["entity"]["client-id"]: e["values"] for e in json.loads((out / "proposal.json").read_text())}


def _usage(out: Path, client: str, key: str) -> dict[str, Any]:
    rows = [r for r in pq.read_table(out / "usage").to_pylist() if r["entity_client_id"] == client and r["key"] == key]
    assert len(rows) == 1
    return rows[0]


@pytest.mark.spark
def test_a_client_throttled_on_purpose_is_sized_by_its_window_and_the_lift_is_marked(ran: tuple[Any, Path]) -> None:
    _, out = ran
    held = _proposal(out)["held"]["producer_byte_rate"]
    # per-second cells made it 1.5 MB x 1.2 = 1,800,000 (3.6x the quota); over the quota window it is the rate
    # the quota let through, with the headroom: 500,000 x 1.2
    assert held == 600_000.0
    row = _usage(out, "held", "producer_byte_rate")
    assert row["lifts"] and row["current_limit"] == THROTTLED_QUOTA
    assert row["current_source"] == "{user=ANONYMOUS, client-id=held}"
    assert row["active_seconds"] == 6 and row["throttled_share"] > 0
    assert "lifts the quota in force, 500,000 from {user=ANONYMOUS, client-id=held}, 1.2x" in row["warning"]


@pytest.mark.spark
def test_one_second_of_traffic_proposes_nothing(ran: tuple[Any, Path]) -> None:
    _, out = ran
    assert "once" not in _proposal(out)  # it was cut from 50 (its <default>) to --min-rate 1.0
    row = _usage(out, "once", "request_percentage")
    assert not row["proposed"] and row["active_seconds"] == 1
    assert row["current_limit"] == 50.0 and row["current_source"] == "{user=ANONYMOUS, client-id=<default>}"
    assert row["warning"].startswith("thin evidence: active 1 s (fewer than --min-active-seconds 5)")


@pytest.mark.spark
def test_values_are_round(ran: tuple[Any, Path]) -> None:
    _, out = ran
    steady = _proposal(out)["steady"]
    assert steady == {"producer_byte_rate": 149_000.0, "request_percentage": 1.97}
    row = _usage(out, "steady", "request_percentage")
    assert row["current_limit"] == 50.0 and row["warning"] is None and not row["lifts"]


@pytest.mark.spark
def test_the_proposal_is_printed_with_its_evidence_and_progress_without_a_terminal(ran: tuple[Any, Path]) -> None:
    result, _ = ran
    table = result.stdout
    for text in ("in force (source)", "active s", "throttled",
                 "500,000 ({user=ANONYMOUS, client-id=held})", "600,000", "149,000", "1.97",
                 "50 ({user=ANONYMOUS, client-id=<default>})", "thin evidence"):  # fmt: skip
        assert text in table, text
    assert "1.9676" not in table
    # no terminal: a line on stderr per stage (the fixture reports every stage at once: QUIET_S 0; the one-second
    # quiet time itself is tests/cli/test_progress.py's)
    lines = [line for line in result.stderr.splitlines() if line.startswith("recommend: ")]
    stages = [line.split(": ", 1)[1].split(" (+")[0] for line in lines]
    assert {"clients", "decisions"} <= set(stages), result.stderr
