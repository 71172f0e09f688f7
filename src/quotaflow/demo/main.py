"""``python -m quotaflow.demo`` (what ``make demo`` runs): the main job on embedded defaults.

The demo is an ordered list of stages, each a function of a shared :class:`DemoContext`. Later parts append their
own stages to :data:`STAGES` (gateway, pipeline); every stage records the files it writes in ``ctx.results`` and the
last step prints where they are.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pyarrow.dataset as ds
from rich.console import Console
from rich.table import Table

from quotaflow.admin import Admin, Alteration
from quotaflow.admin.codec import describe_to_json
from quotaflow.cli.recommend import proposal_table
from quotaflow.core.entities import DEFAULT, QuotaEntity, entity_text
from quotaflow.core.filters import FilterComponent, QuotaFilter
from quotaflow.core.javafmt import java_double_str
from quotaflow.core.precedence import LEVEL_NAMES
from quotaflow.demo.tables import print_table
from quotaflow.store.sqlite import SqliteStore

DEFAULT_OUT: Final = Path("demo-out")


@dataclass
class DemoContext:
    out_dir: Path
    console: Console
    admin: Admin
    store_path: Path
    results: dict[str, Path] = field(default_factory=dict)  # description -> file


Stage = Callable[[DemoContext], None]

# One quota at every precedence level (KIP-55), plus connection-rate quotas for ips (KIP-612).
DEMO_QUOTAS: Final[list[tuple[QuotaEntity, dict[str, float | None]]]] = [
    (QuotaEntity(user="alice", client_id="ingest"), {"producer_byte_rate": 5_000_000.0}),
    (QuotaEntity(user="alice", client_id=DEFAULT), {"producer_byte_rate": 3_000_000.0}),
    (QuotaEntity(user="alice"), {"producer_byte_rate": 2_000_000.0, "consumer_byte_rate": 4_000_000.0}),
    (QuotaEntity(user=DEFAULT, client_id="reporting"), {"consumer_byte_rate": 1_500_000.0}),
    (QuotaEntity(user=DEFAULT, client_id=DEFAULT), {"request_percentage": 50.0}),
    (QuotaEntity(user=DEFAULT), {"producer_byte_rate": 1_000_000.0, "consumer_byte_rate": 2_000_000.0}),
    (QuotaEntity(client_id="batch-loader"), {"producer_byte_rate": 10_000_000.0}),
    (QuotaEntity(client_id=DEFAULT), {"controller_mutation_rate": 10.0}),
    (QuotaEntity(user="user with spaces"), {"request_percentage": 200.0}),
    (QuotaEntity(ip="127.0.0.1"), {"connection_creation_rate": 100.0}),
    (QuotaEntity(ip=DEFAULT), {"connection_creation_rate": 20.0}),
]
DEMO_CLIENTS: Final = [
    ("alice", "ingest"),
    ("alice", "other-app"),
    ("bob", "reporting"),
    ("bob", "batch-loader"),
    ("carol", "anything"),
    ("user with spaces", "x"),
]


def entity_label(entity: QuotaEntity | None) -> str:
    return "-" if entity is None else entity_text(entity.to_wire())


def stage_alter(ctx: DemoContext) -> None:
    """AlterClientQuotas: a valid batch across all levels, then a batch that Kafka would partly reject."""
    results = ctx.admin.alter([Alteration.of(e, ops) for e, ops in DEMO_QUOTAS])
    ctx.console.print(f"[bold]alter[/]: {sum(r.ok for r in results)}/{len(results)} entities applied")
    rejected = ctx.admin.alter([
        Alteration.of({"user": "dave"}, {"producer_byte_rate": 1.5}),
        Alteration.of({"user": "dave", "ip": "10.0.0.1"}, {"producer_byte_rate": 100.0}),
        Alteration.of({"client-id": "x"}, {"consumer_byte_rate": 0.0}),
    ])
    table = Table("entity", "code", "message", title="Kafka-exact per-entity errors (nothing written for them)")
    for r in rejected:
        table.add_row(str(dict(r.entity)), r.error.name, r.error.message or "")
    print_table(ctx.console, table)


def stage_describe(ctx: DemoContext) -> None:
    """DescribeClientQuotas: everything, then a strict any-user filter."""
    everything = ctx.admin.describe(QuotaFilter.all())
    table = Table("entity", "path", "quotas", title="describe: all entities")
    for d in everything:
        values = ", ".join(f"{k}={java_double_str(v)}" for k, v in sorted(d.values.items()))
        table.add_row(entity_label(d.entity), d.entity.path, values)
    print_table(ctx.console, table)
    users_only = ctx.admin.describe(QuotaFilter.contains_only([FilterComponent.any("user")]))
    ctx.console.print(f"containsOnly(any user) matches {len(users_only)} entities (the default user included)")
    path = ctx.out_dir / "describe.json"
    path.write_text(json.dumps(describe_to_json(everything), indent=2))  # as client-quotas --output json
    ctx.results["describe (JSON)"] = path


def stage_resolve(ctx: DemoContext) -> None:
    """Resolve: which quota applies to each client, who supplied it, and who shares the bucket."""
    index = ctx.admin.index()
    table = Table("user", "client-id", "key", "value", "level", "supplied by", "quota-id (shared bucket)",
                  title="resolve: effective quotas")
    dump = []
    for user, client in DEMO_CLIENTS:
        res = index.resolve(user, client)
        for key, q in sorted(res.quotas.items()):
            level = "-" if q.level is None else f"{q.level} {LEVEL_NAMES[q.level]}"
            tags = "-" if q.quota_id is None else f"{q.quota_id['user']}:{q.quota_id['client-id']}"
            value = "unlimited" if q.value is None else java_double_str(q.value)
            table.add_row(user, client, key, value, level, entity_label(q.entity), tags)
            dump.append({"user": user, "client-id": client, "key": key, "value": q.value, "level": q.level,
                         "entity": None if q.entity is None else q.entity.to_wire(), "quota_id": q.quota_id,
                         "overridden": [{"level": c.level, "value": c.value} for c in q.overridden]})
    for ip in ("127.0.0.1", "192.0.2.7"):
        q = index.resolve_ip(ip).quotas["connection_creation_rate"]
        table.add_row(f"ip {ip}", "", q.key, "unlimited" if q.value is None else java_double_str(q.value),
                      str(q.level), entity_label(q.entity), f"ip={ip}")
    print_table(ctx.console, table)
    path = ctx.out_dir / "resolve.json"
    path.write_text(json.dumps(dump, indent=2))
    ctx.results["resolve (JSON)"] = path


def stage_change_log(ctx: DemoContext) -> None:
    """The change log engines and gateways poll: one row per effective key change."""
    changes = ctx.admin.store.changes_since(0)
    path = ctx.out_dir / "changes.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["seq", "ts_ms", "path", "key", "value"])
        for c in changes:
            w.writerow([c.seq, c.ts_ms, c.path, c.key, "" if c.value is None else c.value])
    ctx.console.print(f"[bold]change log[/]: {len(changes)} changes, last seq {ctx.admin.store.last_seq()}")
    ctx.results["change log (CSV)"] = path


GATEWAY_DIR: Final = "gateway"
PIPELINE_DIR: Final = "pipeline"


def stage_gateway(ctx: DemoContext) -> None:
    """Live traffic: tansu behind the gateway, a throttled and an unthrottled producer, usage events logged."""
    from quotaflow.demo import gateway_stage

    summary = gateway_stage.run(ctx.out_dir / GATEWAY_DIR, ctx.store_path, console=ctx.console)
    ctx.results["gateway usage events (Parquet)"] = Path(summary["events"])
    ctx.results["gateway log"] = Path(summary["gateway_log"])


def stage_backtest_report(ctx: DemoContext) -> None:
    """Spark backtest of the gateway's own event log against the store, then the HTML report."""
    from quotaflow.demo import pipeline_stage

    gateway_dir = ctx.out_dir / GATEWAY_DIR
    with ctx.console.status("backtest on Spark (local)") as status:
        result = pipeline_stage.run(gateway_dir / "events", ctx.store_path, ctx.out_dir / PIPELINE_DIR,
                                progress=lambda msg: status.update(msg),
                                broker_config=gateway_dir / "gateway.properties")
    counts = ", ".join(f"{k}={v}" for k, v in sorted(result["counts"].items()))
    ctx.console.print(f"[bold]backtest[/]: {counts}")
    ctx.results["backtest (Parquet)"] = Path(result["backtest"])
    ctx.results["report (HTML)"] = Path(result["report"])
    ctx.results["quota advisor (proposal.json, usage, backtest)"] = Path(result["advisor"])
    ctx.results["quota advisor report (HTML)"] = Path(result["advisor_report"])
    usage = ds.dataset(Path(result["advisor"]) / "usage", format="parquet").to_table().to_pylist()
    title = "quota advisor: proposed quotas for the demo's clients (p99 of the rate over the quota window x 1.2)"
    print_table(ctx.console, proposal_table(usage, title))
    ctx.console.print(f"apply it: quotaflow client-quotas --store {ctx.store_path} --alter --from-file "
                      f"{Path(result['advisor']) / 'proposal.json'} --validate-only", highlight=False, soft_wrap=True)


STAGES: list[tuple[str, Stage]] = [
    ("alter", stage_alter),
    ("describe", stage_describe),
    ("resolve", stage_resolve),
    ("change log", stage_change_log),
    ("gateway: live enforcement", stage_gateway),
    ("pipeline: backtest + report + quota advisor", stage_backtest_report),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quotaflow.demo", description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default ./demo-out)")
    args = parser.parse_args(argv)
    out_dir: Path = args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    store_path = out_dir / "quotaflow.db"
    for stale in (store_path, store_path.with_name(store_path.name + "-wal"),
                  store_path.with_name(store_path.name + "-shm")):
        stale.unlink(missing_ok=True)
    console = Console()
    ctx = DemoContext(out_dir, console, Admin(SqliteStore(store_path)), store_path)
    ctx.results["quota store (SQLite)"] = store_path
    try:
        for name, stage in STAGES:
            console.rule(f"[bold cyan]{name}")
            stage(ctx)
    finally:
        ctx.admin.close()
    console.rule("[bold green]results")
    for what, path in ctx.results.items():
        console.print(f"{what}: {path.resolve()}")
    console.print(f"Try: quotaflow client-quotas --store {store_path} --resolve --names user=alice,client-id=ingest")
    gateway_cmd, console_cmd = console_commands(store_path, out_dir)
    console.print("Open the console on the demo's store and backtest. Its Live page watches a gateway: the demo's "
                  "stopped with it, so start one configured like it in front of your broker (BROKER:9092), then "
                  "open the URL the console prints:", highlight=False)
    console.print(f"  {gateway_cmd} &", highlight=False, soft_wrap=True)
    console.print(f"  {console_cmd}", highlight=False, soft_wrap=True)
    return 0


CONSOLE_GATEWAY_HTTP: Final = ("127.0.0.1", 9193)


def console_commands(store_path: Path, out_dir: Path) -> tuple[str, str]:
    """The gateway (the demo's settings, its store) and the console (that store, the demo's backtest, that
    gateway's /metrics) to run after the demo. Read-only, so nobody needs to sign in; docs/console.md says how to
    allow changes."""
    host, port = CONSOLE_GATEWAY_HTTP
    gateway = shlex.join([
        "quotaflow", "gateway", "--upstream", "BROKER:9092", "--listen", "PLAINTEXT=127.0.0.1:9192",
        "--store", str(store_path), "--config", str(out_dir / GATEWAY_DIR / "gateway.properties"),
        "--metrics-port", str(port),
    ])
    console = shlex.join([
        "quotaflow", "console", "--store", str(store_path), "--backtests", str(out_dir / PIPELINE_DIR),
        "--gateway", f"http://{host}:{port}", "--read-only",
    ])
    return gateway, console
