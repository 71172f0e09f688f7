"""Console benchmark: what the HTTP console adds over calling the admin directly, and the cost of one /metrics scrape.

    .venv/bin/python bench/console.py [--entities 20000] [--requests 200] [--series 2000] [--out FILE.md]

Baselines, in the same process run:
* API: the admin call plus the same JSON encoding (what ``client-quotas --output json`` does in-process) against the
  console's ``GET /api/quotas`` / ``GET /api/resolve`` over real HTTP (uvicorn on loopback, one keep-alive client).
* Resolve: the CLI builds the resolver over the whole snapshot for each call; the console keeps it until the
  store changes, so its ratio is below 1 on a large store.
* Live: prometheus-client's text parser alone against the console's whole ingest of the same scrape (parse, quota
  lookup per quota-id, history append).
Wall-clock medians; the machine is shared, so compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
from prometheus_client.parser import text_string_to_metric_families

from quotaflow.admin import Admin, Alteration
from quotaflow.admin.codec import describe_to_json, resolution_to_json
from quotaflow.console import ConsoleConfig, create_app
from quotaflow.console.live import LiveMetrics
from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.filters import FilterComponent, QuotaFilter
from quotaflow.store.sqlite import SqliteStore
from quotaflow.testing.asgi import serve


def median_ms(fn: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def seed(store: SqliteStore, n: int) -> None:
    entities = [QuotaEntity(user=DEFAULT), QuotaEntity(user=DEFAULT, client_id=DEFAULT)]
    entities += [QuotaEntity(user=f"user-{i}", client_id=f"client-{i}") if i % 2 else QuotaEntity(user=f"user-{i}")
                 for i in range(n - len(entities))]
    admin = Admin(store)
    for start in range(0, len(entities), 1000):
        admin.alter([Alteration.of(e, {"producer_byte_rate": 1e6, "consumer_byte_rate": 2e6})
                     for e in entities[start:start + 1000]])


def scrape_text(series: int) -> str:
    lines = ["# TYPE kafka_server_produce_byte_rate gauge"]
    lines += [f'kafka_server_produce_byte_rate{{user="user-{i}",client_id=""}} {1000.0 * i}' for i in range(series)]
    lines += ["# TYPE kafka_server_produce_throttle_time gauge"]
    lines += [f'kafka_server_produce_throttle_time{{user="user-{i}",client_id=""}} 12.5' for i in range(series // 10)]
    lines += ["# TYPE kafka_server_socket_server_metrics_connection_accept_rate gauge",
              'kafka_server_socket_server_metrics_connection_accept_rate{listener="PLAINTEXT",ip=""} 3.0']
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entities", type=int, default=20_000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--series", type=int, default=2_000)
    ap.add_argument("--out", type=Path, default=Path("bench/results/console.md"))
    args = ap.parse_args()
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "q.db")
        seed(store, args.entities)
        admin = Admin(store)
        app = create_app(store, ConsoleConfig(read_only=True))
        one = QuotaFilter((FilterComponent.exact("user", "user-7"),), True)
        everything = QuotaFilter()
        with serve(app) as url, httpx2.Client(base_url=url) as http:
            cases: list[tuple[str, Callable[[], object], Callable[[], object], int]] = [
                ("describe one entity (exact user, strict)",
                 lambda: json.dumps(describe_to_json(admin.describe(one))),
                 lambda: http.get("/api/quotas", params={"user": "user-7", "strict": "1"}).content, args.requests),
                (f"describe all {args.entities} entities",
                 lambda: json.dumps(describe_to_json(admin.describe(everything))),
                 lambda: http.get("/api/quotas").content, max(5, args.requests // 20)),
                ("resolve one (user, client-id)",
                 lambda: json.dumps(resolution_to_json(admin.resolve("user-7", "client-7"))),
                 lambda: http.get("/api/resolve", params={"user": "user-7", "client-id": "client-7"}).content,
                 args.requests),
            ]
            for name, direct, over_http, n in cases:
                direct()
                over_http()  # warm both
                rows.append((name, median_ms(direct, n), median_ms(over_http, n)))
        text = scrape_text(args.series)
        live = LiveMetrics(["http://gw:1"], app.state.console.index)  # the app's index: rebuilt on store changes
        gw = live.gateways["http://gw:1"]
        parse = lambda: sum(len(f.samples) for f in text_string_to_metric_families(text))  # noqa: E731
        clock = iter(range(10**9))
        ingest = lambda: live.ingest(gw, text, float(next(clock)))  # noqa: E731
        rows.append((f"one /metrics scrape, {args.series} quota-ids", median_ms(parse, 20), median_ms(ingest, 20)))
        store.close()
    load = os.getloadavg()[0]
    out = [
        f"# bench/console.py ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.python_version()}, "
        f"load average {load:.1f} on {os.cpu_count()} cores)",
        "",
        f"`python bench/console.py --entities {args.entities} --requests {args.requests} --series {args.series}`",
        "",
        "| case | baseline ms (median) | console ms (median) | ratio |",
        "|---|---:|---:|---:|",
    ]
    for name, base, mine in rows:
        out.append(f"| {name} | {base:.3f} | {mine:.3f} | {mine / base:.3g} |")
    out += ["", "Baselines: the admin call + JSON encoding in-process (API rows); prometheus-client's parser alone "
            "(scrape row). Console: over real HTTP on loopback (API rows); the whole ingest (scrape row)."]
    report = "\n".join(out) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)


if __name__ == "__main__":
    main()
