"""Gateway overhead: produce throughput and latency straight to tansu vs through the gateway, same client, one run.

    .venv/bin/python bench/gateway.py [--seconds 8] [--size 1024] [--rate 500,2000] [--rounds 2] \
        [--out bench/results/gateway.md]

The client is confluent-kafka (librdkafka, acks=1) in this process; the gateway is a `quotaflow gateway` subprocess
(uvloop when installed, usage event log on, no quotas configured, so every request is checked and logged but none
is throttled) in front of a tansu broker on 127.0.0.1. Two loads, each run against the broker directly and through
the gateway, alternating for ``--rounds`` rounds so drift on a shared machine hits both alike:

* flat out: produce ``--size``-byte messages as fast as the client can for ``--seconds`` (linger.ms=5); MB/s of
  delivered payload, and delivery latency percentiles;
* moderate: each ``--rate`` in messages/s (linger.ms=0, so one request per message), the delivery-latency p50/p99
  (librdkafka's per-message latency from ``produce()`` to the delivery report).

Targets (issue 5): gateway throughput >= 70 % of direct; p99 added <= 2 ms at moderate load.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from quotaflow.testing.gateway_process import GatewayProcess
from quotaflow.testing.tansu import Tansu


@dataclass
class Sample:
    mb_s: float
    latencies_ms: list[float] = field(default_factory=list)
    gateway_cpu_s: float = 0.0  # CPU seconds the gateway process used during the run
    messages: int = 0

    def pct(self, q: float) -> float:
        data = sorted(self.latencies_ms)
        return data[min(len(data) - 1, int(q * len(data)))] if data else float("nan")


def create_topic(bootstrap: str) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    return name


def produce(bootstrap: str, size: int, seconds: float, rate: float | None) -> Sample:
    """Produce for ``seconds`` (flat out, or paced to ``rate`` msg/s); delivered MB/s and per-message latency."""
    topic = create_topic(bootstrap)
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "acks": 1,
        "linger.ms": 0 if rate else 5,
        "batch.size": 65_536,
        "queue.buffering.max.kbytes": 16_384,
        "enable.idempotence": False,
    }
    producer = Producer(config)
    value = os.urandom(size)
    delivered = 0
    latencies: list[float] = []

    def on_delivery(err: object, msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += size
            latencies.append(msg.latency() * 1000)  # type: ignore[attr-defined]

    # warm up: connections, metadata, the topic's first batch
    producer.produce(topic, value, on_delivery=lambda *_: None)
    producer.flush(10)
    start = time.perf_counter()
    end = start + seconds
    sent = 0
    while (now := time.perf_counter()) < end:
        if rate is not None and sent >= (now - start) * rate:
            producer.poll(min(0.001, end - now))
            continue
        try:
            producer.produce(topic, value, on_delivery=on_delivery)
            sent += 1
        except BufferError:
            producer.poll(0.001)
        producer.poll(0)
    producer.flush(30)
    elapsed = time.perf_counter() - start
    return Sample(delivered / elapsed / 1e6, latencies, messages=len(latencies))


def merge(samples: list[Sample]) -> Sample:
    return Sample(
        statistics.fmean(s.mb_s for s in samples),
        [x for s in samples for x in s.latencies_ms],
        sum(s.gateway_cpu_s for s in samples),
        sum(s.messages for s in samples),
    )


def cpu_seconds(pid: int | None) -> float:
    """utime + stime of a process, from /proc (0 where /proc is not available)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rate", default="500,2000", help="moderate loads, messages/s (comma-separated)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    rates = [float(r) for r in args.rate.split(",")]
    loads: list[tuple[str, float | None]] = [("flat out", None), *((f"{r:g} msg/s", r) for r in rates)]
    load_before = os.getloadavg()
    results: dict[tuple[str, str], list[Sample]] = {}
    with Tansu() as tansu, tempfile.TemporaryDirectory(prefix="quotaflow-bench-") as tmp:
        workdir = Path(tmp)
        gateway = GatewayProcess(tansu.bootstrap, workdir / "quotas.db", workdir, event_log=workdir / "events")
        gateway.start()
        try:
            targets = {"direct": tansu.bootstrap, "gateway": gateway.bootstrap}
            for r in range(args.rounds):
                for load, rate in loads:
                    for name in ("direct", "gateway") if r % 2 == 0 else ("gateway", "direct"):
                        cpu = cpu_seconds(gateway.pid)
                        sample = produce(targets[name], args.size, args.seconds, rate)
                        sample.gateway_cpu_s = cpu_seconds(gateway.pid) - cpu
                        results.setdefault((load, name), []).append(sample)
                        print(
                            f"round {r + 1} {load:8} {name:7} {sample.mb_s:7.2f} MB/s "
                            f"p50 {sample.pct(0.5):6.2f} ms p99 {sample.pct(0.99):6.2f} ms",
                            flush=True,
                        )
        finally:
            gateway.stop()

    load_after = os.getloadavg()
    merged = {k: merge(v) for k, v in results.items()}
    lines = [
        "# Gateway overhead (bench/gateway.py)",
        "",
        f"`.venv/bin/python bench/gateway.py --seconds {args.seconds:g} --size {args.size} --rate {args.rate} "
        f"--rounds {args.rounds}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared with other jobs), Python "
        f"{platform.python_version()}. Client: confluent-kafka (acks=1, {args.size}-byte messages). Gateway: "
        "`quotaflow gateway` subprocess with the usage event log on, no quotas configured. Upstream: tansu 0.6.0, "
        "memory storage, 127.0.0.1. Rounds alternate direct/gateway order; numbers are the mean MB/s and the "
        "latency percentiles over all messages of all rounds. Load average (1 min) before / after the run: "
        f"{load_before[0]:.1f} / {load_after[0]:.1f}.",
        "",
        "| load | path | MB/s | p50 ms | p99 ms | gateway CPU µs/message |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for load, _ in loads:
        for name in ("direct", "gateway"):
            s = merged[(load, name)]
            cpu = f"{s.gateway_cpu_s / s.messages * 1e6:.0f}" if name == "gateway" and s.messages else "-"
            lines.append(f"| {load} | {name} | {s.mb_s:.2f} | {s.pct(0.5):.2f} | {s.pct(0.99):.2f} | {cpu} |")
    flat_ratio = merged[("flat out", "gateway")].mb_s / merged[("flat out", "direct")].mb_s
    lines += [
        "",
        f"* Throughput through the gateway: **{flat_ratio:.0%}** of direct (target >= 70 %): "
        f"{'met' if flat_ratio >= 0.7 else 'NOT met'}.",
    ]
    for load, _ in loads[1:]:
        direct, via = merged[(load, "direct")], merged[(load, "gateway")]
        p50_added, p99_added = via.pct(0.5) - direct.pct(0.5), via.pct(0.99) - direct.pct(0.99)
        lines.append(
            f"* Added latency at {load}: p50 **{p50_added:+.2f} ms**, p99 **{p99_added:+.2f} ms** "
            f"(target p99 <= 2 ms): {'met' if p99_added <= 2 else 'NOT met'}."
        )
    lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
