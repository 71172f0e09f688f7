"""The gateway part of ``make demo``: real clients through a real gateway in front of a real broker.

Starts tansu and a ``quotaflow gateway`` child process (usage event log into ``out_dir/events``), sets a
``producer_byte_rate`` for one client through the gateway's own AlterClientQuotas, then runs that throttled producer
and an unthrottled one side by side, flat out, for a few seconds. The table shows each client's resolved quota
(from the gateway's ``/resolve``), what the client got delivered, and what the gateway logged. Everything started
here is stopped by PID before returning.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.table import Table

from quotaflow.admin import Alteration
from quotaflow.core.entities import QuotaEntity
from quotaflow.demo.tables import print_table
from quotaflow.events import API_PRODUCE, REQUESTS_DIR, read_dataset
from quotaflow.gateway.auth.sasl import ANONYMOUS
from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu

THROTTLED: Final = "demo-throttled"
UNTHROTTLED: Final = "demo-unthrottled"
THROTTLED_RATE: Final = 500_000.0  # bytes/s
NO_LIMIT: Final = {"producer_byte_rate": 1e12, "request_percentage": 1e6}  # far above anything this machine does
RUN_SECONDS: Final = 8.0
STEADY_SECONDS: Final = 5.0  # the rate shown as "steady": the last seconds of the run, after the initial burst
# Kafka lets a client spend a whole quota window at once before throttling it (11 x 1 s samples by default: 10 s of
# quota up front). Three 1 s samples (quota.window.num, a Kafka broker setting) keep that burst short enough for a
# few-second demo to show the steady rate.
GATEWAY_PROPERTIES: Final = "quota.window.num=3\nquota.window.size.seconds=1\n"
VALUE: Final = b"d" * 4_000


def _produce_flat_out(bootstrap: str, topic: str, client_id: str, seconds: float) -> int:
    """Produce as fast as the client can for ``seconds``; returns the payload bytes delivered."""
    from confluent_kafka import Producer

    delivered = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += len(VALUE)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "batch.size": 65_536,
            "max.in.flight": 5,
            "queue.buffering.max.kbytes": 2_048,
            "enable.idempotence": False,
            "log_level": 0,
        }
    )
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            producer.produce(topic, VALUE, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.purge(in_queue=True, in_flight=False)
    producer.flush(10)
    return delivered


def _set_quotas(gw: GatewayProcess) -> dict[str, Any]:
    """Through the gateway's own quota admin API: a limit for one client, none that binds for the other."""
    from quotaflow.admin.wire import WireAdmin

    wire = WireAdmin(gw.bootstrap, http_url=gw.http_url)
    try:
        results = wire.alter(
            [Alteration.of(QuotaEntity(user=ANONYMOUS, client_id=THROTTLED), {"producer_byte_rate": THROTTLED_RATE})]
        )
        free = wire.resolve(ANONYMOUS, UNTHROTTLED)
        # the store may hold defaults (the demo's own quotas do): override whatever would bind the free client
        binding = {k: v for k, v in NO_LIMIT.items() if free.quotas[k].value is not None}
        if binding:
            results += wire.alter([Alteration.of(QuotaEntity(user=ANONYMOUS, client_id=UNTHROTTLED), binding)])
        failed = [r for r in results if not r.ok]
        if failed:
            raise failed[0].error.exception()
        time.sleep(1.0)  # the gateway applies store changes within a poll (250 ms)
        return {c: wire.resolve(ANONYMOUS, c).quotas["producer_byte_rate"] for c in (THROTTLED, UNTHROTTLED)}
    finally:
        wire.close()


def _gateway_side(events_dir: Path, start_ms: int, end_ms: int) -> dict[str, dict[str, float]]:
    table = read_dataset(events_dir, REQUESTS_DIR)
    steady_from = end_ms - int(STEADY_SECONDS * 1000)
    out: dict[str, dict[str, float]] = {
        c: {"bytes": 0.0, "steady_bytes": 0.0, "requests": 0.0, "throttled": 0.0, "max_throttle_ms": 0.0}
        for c in (THROTTLED, UNTHROTTLED)
    }
    if table is None:
        return out
    for row in table.to_pylist():
        stats = out.get(row["client_id"])
        if stats is None or row["api_key"] != API_PRODUCE or not start_ms <= row["ts_ms"] < end_ms:
            continue
        stats["bytes"] += row["request_bytes"]
        if row["ts_ms"] >= steady_from:
            stats["steady_bytes"] += row["request_bytes"]
        stats["requests"] += 1
        stats["throttled"] += row["throttle_ms"] > 0
        stats["max_throttle_ms"] = max(stats["max_throttle_ms"], row["throttle_ms"])
    return out


def run(
    out_dir: Path, store_path: Path, *, console: Console | None = None, seconds: float = RUN_SECONDS
) -> dict[str, Any]:
    """Run the stage; returns a summary (rates in bytes/s, paths). ``store_path`` is the store the gateway serves."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    console = console or Console()
    out_dir.mkdir(parents=True, exist_ok=True)
    events_dir = out_dir / "events"
    properties = out_dir / "gateway.properties"
    properties.write_text(GATEWAY_PROPERTIES)
    with (
        Tansu() as tansu,
        GatewayProcess(
            tansu.bootstrap,
            store_path,
            out_dir,
            event_log=events_dir,
            metrics=True,
            extra_args=("--config", str(properties)),
        ) as gw,
    ):
        console.print(
            f"[bold]gateway[/]: tansu on {tansu.bootstrap} (pid {tansu.pid}), gateway on {gw.bootstrap} "
            f"(pid {gw.pid}), HTTP {gw.http_url}"
        )
        quotas = _set_quotas(gw)
        topic = f"demo-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": gw.bootstrap, "log_level": 0})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
        del admin  # librdkafka handles log to stderr when the gateway goes away under them
        delivered: dict[str, int] = {}

        def worker(client_id: str) -> None:
            delivered[client_id] = _produce_flat_out(gw.bootstrap, topic, client_id, seconds)

        threads = [threading.Thread(target=worker, args=(c,)) for c in (THROTTLED, UNTHROTTLED)]
        start_ms = time.time_ns() // 1_000_000
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 60)
        end_ms = time.time_ns() // 1_000_000
    # the gateway has exited (SIGTERM): its event log is complete on disk
    elapsed = (end_ms - start_ms) / 1000
    seen = _gateway_side(events_dir, start_ms, end_ms)
    table = Table(
        "client-id",
        "quota",
        "client got",
        "gateway logged",
        f"last {STEADY_SECONDS:g} s",
        "throttled",
        "max throttle",
        title=f"Two producers, flat out for {seconds:g} s through the gateway",
    )
    summary: dict[str, Any] = {"events": str(events_dir), "gateway_log": str(gw.log_path), "seconds": elapsed}
    for client in (THROTTLED, UNTHROTTLED):
        q = quotas[client]
        quota_text = "unlimited" if q.value is None else f"{q.value / 1e6:g} MB/s"
        client_rate = delivered.get(client, 0) / elapsed
        gateway_rate = seen[client]["bytes"] / elapsed
        steady_rate = seen[client]["steady_bytes"] / STEADY_SECONDS
        table.add_row(
            client,
            quota_text,
            f"{client_rate / 1e6:.2f} MB/s",
            f"{gateway_rate / 1e6:.2f} MB/s",
            f"{steady_rate / 1e6:.2f} MB/s",
            f"{seen[client]['throttled']:.0f} of {seen[client]['requests']:.0f}",
            f"{seen[client]['max_throttle_ms']:.0f} ms",
        )
        summary[client] = {
            "quota": q.value,
            "client_rate": client_rate,
            "gateway_rate": gateway_rate,
            "steady_rate": steady_rate,
            "throttled_responses": seen[client]["throttled"],
            "requests": seen[client]["requests"],
        }
    print_table(console, table)
    console.print(f"usage events: {events_dir} (Parquet, the schema of docs/events.md)")
    return summary
